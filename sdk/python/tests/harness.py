"""Runs the real meshflows binary for the tests ($MESHFLOWS_BIN, built by python_test.go)."""

import json
import logging
import os
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


# Connections to port 1 are refused: nothing listens there and no test binds it.
DEAD = "http://127.0.0.1:1"


class PortBlock:
    """Hands out the ports of a block in turn, each once."""

    def __init__(self, first: int, count: int) -> None:
        self._next, self._end = first, first + count

    def take(self) -> int:
        if self._next >= self._end:
            raise RuntimeError(f"the test ports ({PORTS_ENV}) are used up: ask python_test.go for more")
        self._next += 1
        return self._next - 1


# python_test.go hands the suites a block of loopback ports from internal/freeport: free a
# moment ago, below the kernel's ephemeral range, where no outgoing connection of a test
# running in parallel can take one before the server binds it. As "FIRST-LAST".
PORTS_ENV = "MESHFLOWS_TEST_PORTS"


def _block_from_env() -> Optional[PortBlock]:
    value = os.environ.get(PORTS_ENV, "")
    if not value:
        return None
    first, last = (int(p) for p in value.split("-"))
    return PortBlock(first, last - first + 1)


_ports = _block_from_env()


def free_port() -> int:
    """A loopback port for a server: the next of the block python_test.go gave, or, when the
    suites run by hand without one, a port the kernel picks (which a parallel test could take)."""
    if _ports is not None:
        return _ports.take()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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
