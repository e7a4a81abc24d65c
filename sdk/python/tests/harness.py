"""Runs the real meshflows binary for the tests ($MESHFLOWS_BIN, built by python_test.go)."""

import json
import logging
import os
import random
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Callable, List, Optional

BIN = os.environ.get("MESHFLOWS_BIN", "")

# The agents log every failed attempt; the hostile tests cause many on purpose.
logging.getLogger("meshflows").setLevel(logging.CRITICAL)


def require_binary(case: unittest.TestCase) -> None:
    if not BIN or not os.path.exists(BIN):
        case.skipTest("MESHFLOWS_BIN is not set (run under 'go test ./sdk/python/')")


_LOWEST_PORT = 10000
_given_ports: set = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's setting, else 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low >= _LOWEST_PORT + 1000 else 32768


def free_port() -> int:
    """A loopback port that was free a moment ago, below the ephemeral range, never given twice.

    A port probed on port 0 comes from the ephemeral range, where the kernel also picks the
    local port of every outgoing connection: a test running in parallel could take it before
    the server binds it. Below that range the kernel never assigns a port by itself.
    """
    high = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(_LOWEST_PORT, high)
        if port in _given_ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free loopback port in [{_LOWEST_PORT}, {high}) after 100 tries")


def eventually(what: str, cond: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:
            pass
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s: {what}")


def get_json(url: str, context: Any = None) -> Any:
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        return json.loads(r.read())


class Registry:
    """A `meshflows registry` process on loopback, open (or with the flags given)."""

    def __init__(self, *flags: str, port: Optional[int] = None, insecure: bool = True, scheme: str = "http",
                 context: Any = None) -> None:
        self.port = port or free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.context = context
        args: List[str] = [BIN, "registry", "--listen", f"127.0.0.1:{self.port}", "--lease-ttl", "3s",
                           "--heartbeat-interval", "1s", "--sweep-interval", "100ms", "--gateway-ttl", "1s",
                           "--slow-start", "200ms", "--log-level", "error"]
        if insecure:
            args.append("--insecure")
        args.extend(flags)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            eventually("the registry answers /healthz", lambda: self._healthy(), timeout=20)
        except AssertionError:
            self.stop()
            self.log.seek(0)
            raise AssertionError("the registry did not start: " + self.log.read().decode(errors="replace"))

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError("the registry exited")
        return get_json(self.url + "/healthz", self.context).get("status") == "ok"

    def instance(self, instance_id: str, context: Any = None) -> Optional[dict]:
        try:
            return get_json(f"{self.url}/v1/services/{instance_id}", context or self.context)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def epoch(self) -> str:
        return get_json(self.url + "/v1/discovery/health", self.context)["registry_epoch"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
