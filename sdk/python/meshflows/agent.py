"""The provider agent: keeps one instance registered, as the Go ``provider.Agent`` does."""

import logging
import random
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence

from ._client import DEFAULT_TLS_RELOAD_INTERVAL, RegistryClient, tls_files
from .errors import APIError, TransportError

log = logging.getLogger("meshflows.agent")

HEALTHS = ("ok", "degraded", "failing")

# Reasons to register again (the Go agent's metric labels).
REASON_NOT_FOUND = "not_found"
REASON_GENERATION_MISMATCH = "generation_mismatch"
REASON_EPOCH_CHANGED = "epoch_changed"
REASON_HEARTBEAT_FAILURES = "heartbeat_failures"
REASON_CAPABILITIES_UPDATED = "capabilities_updated"


class Capability:
    """One versioned capability an instance offers."""

    def __init__(self, capability_id: str, capability_version: str, provider: str,
                 contract_schema_version: str = "1.0", metadata: Optional[Dict[str, Any]] = None) -> None:
        self.capability_id = capability_id
        self.capability_version = capability_version
        self.provider = provider
        self.contract_schema_version = contract_schema_version
        self.metadata = metadata or {}

    def to_json(self) -> Dict[str, Any]:
        """The capability as the registration body carries it."""
        return {"capability_id": self.capability_id, "capability_version": self.capability_version,
                "contract_schema_version": self.contract_schema_version, "provider": self.provider, "metadata": self.metadata}


def jittered_retry_after(retry_after, rand: Callable[[], float] = random.random) -> float:
    """The wait a Retry-After asks for, and up to as much again at random: the registry's
    Retry-After is the time it needs to serve the registrations it shed before this one, so
    that a herd shed together comes back spread over that time (0 without one)."""
    if not retry_after or retry_after <= 0:
        return 0.0
    return retry_after + rand() * retry_after


class Backoff:
    """The registration retry schedule: initial, ×multiplier, at most max_delay, plus up to
    jitter seconds (the Go SDK's DefaultBackoff: 100 ms, ×2, 5 min, 100 ms)."""

    def __init__(self, initial: float = 0.1, multiplier: float = 2.0, max_delay: float = 300.0, jitter: float = 0.1) -> None:
        self.initial, self.multiplier, self.max_delay, self.jitter = initial, multiplier, max_delay, jitter

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        d = self.initial
        for _ in range(attempt):
            d *= self.multiplier
            if d >= self.max_delay:
                d = self.max_delay
                break
        return min(d, self.max_delay) + self.jitter * rand()


class Agent:
    """Keeps one instance registered with the registry.

    :meth:`start` runs it on a background thread; :meth:`stop` deregisters the instance with
    its generation (retrying on the next registry while one is away) and waits until every
    gateway has withdrawn it. The agent registers again on 404, 410, a new registry epoch,
    ``failure_threshold`` heartbeat failures in a row and :meth:`update_capabilities`, backs off
    exponentially with jitter (longer when the registry answers Retry-After), and never raises
    out of its thread.
    """

    def __init__(self, registries: Sequence[str], instance_id: str, service_name: str, service_version: str,
                 endpoint: str, capabilities: Sequence[Capability], manifest: Optional[Dict[str, Any]] = None,
                 zone: Optional[str] = None, token: Optional[str] = None, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 heartbeat_interval: Optional[float] = None, request_timeout: float = 5.0,
                 failure_threshold: int = 3, stop_timeout: float = 5.0, drain_timeout: float = 10.0,
                 backoff: Optional[Backoff] = None, tls_reload_interval: float = DEFAULT_TLS_RELOAD_INTERVAL,
                 publish_when_ready: bool = False) -> None:
        self._client = RegistryClient(registries, token=token, context=tls_files(ca_file, cert_file, key_file, tls_reload_interval),
                                      timeout=request_timeout)
        self._lock = threading.Lock()
        self._registration: Dict[str, Any] = {
            "instance_id": instance_id, "service_name": service_name, "service_version": service_version,
            "endpoint": endpoint, "capabilities": [c.to_json() for c in capabilities]}
        if zone:
            self._registration["zone"] = zone
        if manifest is not None:
            self._registration["manifest"] = manifest
        self._heartbeat_override = heartbeat_interval
        self._failure_threshold = failure_threshold
        self._stop_timeout = stop_timeout
        self._drain_timeout = drain_timeout
        self._backoff = backoff or Backoff()
        self._health = "ok"
        # publish when ready: registered not_ready, answered nowhere, until ready() is called;
        # the default (ready from the start) is kept for compatibility
        self._ready = not publish_when_ready
        self._readied = False  # ready() was called: heartbeat ok at once
        self._generation = 0
        self._epoch = ""
        self._interval = 30.0
        self._state = "stopped"
        self._registered = threading.Event()
        self._stopping = threading.Event()
        self._wake = threading.Event()  # an update, or the stop: do not wait out a sleep
        self._updated = False
        self._thread: Optional[threading.Thread] = None
        self.registrations = 0

    # --- public surface -------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The generation of the current registration (0 before the first)."""
        with self._lock:
            return self._generation

    @property
    def registry_epoch(self) -> str:
        """The epoch of the registry that holds the registration."""
        with self._lock:
            return self._epoch

    @property
    def state(self) -> str:
        """registering, registered, backing_off or stopped."""
        with self._lock:
            return self._state

    @property
    def registry(self) -> str:
        """The registry URL the agent talks to now."""
        return self._client.registry

    def start(self) -> "Agent":
        """Starts the agent on a background thread and returns at once."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the agent is already started")
            self._state = "registering"
            self._thread = threading.Thread(target=self._run, name="meshflows-agent", daemon=True)
        self._thread.start()
        return self

    def wait_registered(self, timeout: Optional[float] = None) -> bool:
        """Waits until the instance is registered; False when timeout passed first."""
        return self._registered.wait(timeout)

    def set_health(self, health: str) -> None:
        """Sets what the heartbeats report from the next one on: ok, degraded (the registry
        lowers the instance's weight) or failing (it withdraws the instance)."""
        if health not in HEALTHS:
            raise ValueError(f"health {health!r}: want one of {', '.join(HEALTHS)}")
        with self._lock:
            self._health = health

    @property
    def health(self) -> str:
        """What the heartbeats report: not_ready until ready() with publish_when_ready."""
        with self._lock:
            return self._reported()

    def ready(self) -> None:
        """Says the application is ready to serve. With ``publish_when_ready`` the agent has
        registered the instance not_ready (the registry answers it nowhere, not even as the
        first member of a brand-new service); it now heartbeats ok at once. Otherwise, or
        called again, it does nothing."""
        with self._lock:
            if self._ready:
                return
            self._ready = True
            self._readied = True
        self._wake.set()

    @property
    def is_ready(self) -> bool:
        with self._lock:
            return self._ready

    def _reported(self) -> str:
        # called with the lock held
        return self._health if self._ready else "not_ready"

    def update_capabilities(self, capabilities: Sequence[Capability]) -> None:
        """Replaces the instance's capabilities; the agent registers again with them at once."""
        with self._lock:
            self._registration["capabilities"] = [c.to_json() for c in capabilities]
            self._updated = True
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Deregisters the instance with its generation, waits for the gateways' withdrawal
        acknowledgement (bounded by the drain timeout), and stops the thread, all within timeout."""
        self._stopping.set()
        self._wake.set()
        t = self._thread
        if t is not None:
            t.join(timeout)

    def __enter__(self) -> "Agent":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- the loop ---------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        with self._lock:
            self._state = state

    def _sleep(self, seconds: float) -> bool:
        """Sleeps, waking early on an update or the stop; True when the agent must stop."""
        self._wake.wait(max(0.0, seconds))
        self._wake.clear()
        return self._stopping.is_set()

    def _run(self) -> None:
        try:
            rejoin = False
            while not self._stopping.is_set():
                if not self._register_with_backoff(rejoin):
                    break
                rejoin = True
                reason = self._heartbeat_loop()
                if reason in (REASON_NOT_FOUND, REASON_EPOCH_CHANGED):
                    # A registry that lost its state: the fleet must not arrive at once.
                    if self._sleep(random.uniform(0, self._current_interval())):
                        break
        except Exception:  # never out of the thread
            log.exception("agent loop failed")
        finally:
            self._deregister()
            self._registered.clear()
            self._set_state("stopped")

    def _current_interval(self) -> float:
        return self._heartbeat_override or self._interval

    def _register_with_backoff(self, rejoin: bool = False) -> bool:
        """Registers, retrying with the backoff. Rejoining (registered before: the registry
        restarted or was away), it retries at least once a heartbeat interval, in its second
        half: a restarted registry waits one lease TTL (three intervals) for its fleet, and a
        retry minutes away would drop the instance from every consumer. Retry-After wins,
        with as much again of jitter."""
        attempt = 0
        while not self._stopping.is_set():
            self._set_state("registering")
            try:
                self._register()
                return True
            except APIError as e:
                if e.status == 400:
                    log.error("registration refused as invalid; the agent stops: %s", e)
                    self._stopping.set()
                    return False
                wait = max(self._capped(self._backoff.delay(attempt), rejoin), jittered_retry_after(e.retry_after))
                log.warning("registration failed (attempt %d, retry in %.2fs): %s", attempt + 1, wait, e)
            except TransportError as e:
                wait = self._capped(self._backoff.delay(attempt), rejoin)
                log.warning("registration failed (attempt %d, retry in %.2fs): %s", attempt + 1, wait, e)
            self._set_state("backing_off")
            attempt += 1
            if self._sleep(wait):
                return False
        return False

    def _capped(self, wait: float, rejoin: bool) -> float:
        interval = self._current_interval()
        if rejoin and wait > interval:
            return interval / 2 + random.uniform(0, interval / 2)
        return wait

    def _register(self) -> None:
        with self._lock:
            body = dict(self._registration)
            body["health"] = self._reported()  # as a heartbeat would say: not_ready until ready()
            self._updated = False
            self._readied = False
        _, resp = self._client.request("POST", "/v1/services/register", body)
        with self._lock:
            self._generation = int(resp["generation"])
            self._epoch = resp.get("registry_epoch", "")
            self._interval = float(resp.get("heartbeat_interval_seconds") or 30)
            self._state = "registered"
            self.registrations += 1
        self._registered.set()
        log.info("registered %s generation %d", body["instance_id"], self._generation)

    def _heartbeat_loop(self) -> str:
        failures = 0
        while True:
            # 80–100 % of the interval: agents started together drift apart.
            if self._sleep(self._current_interval() * random.uniform(0.8, 1.0)):
                return ""
            with self._lock:
                updated = self._updated
                self._readied = False  # whatever woke it, the heartbeat below says ready
            if updated:
                self._registered.clear()
                return REASON_CAPABILITIES_UPDATED
            try:
                reason = self._heartbeat()
            except (APIError, TransportError) as e:
                failures += 1
                log.warning("heartbeat failed (%d in a row): %s", failures, e)
                if failures >= self._failure_threshold:
                    self._registered.clear()
                    return REASON_HEARTBEAT_FAILURES
                continue
            failures = 0
            if reason:
                self._registered.clear()
                log.info("registering again: %s", reason)
                return reason

    def _heartbeat(self) -> str:
        with self._lock:
            iid, gen, epoch, health = self._registration["instance_id"], self._generation, self._epoch, self._reported()
        try:
            _, resp = self._client.request("PUT", "/v1/services/" + urllib.parse.quote(iid, safe="") + "/heartbeat",
                                           {"generation": gen, "health": health})
        except APIError as e:
            if e.status == 404:
                return REASON_NOT_FOUND
            if e.status == 410:
                return REASON_GENERATION_MISMATCH
            raise
        if resp.get("registry_epoch") and resp["registry_epoch"] != epoch:
            return REASON_EPOCH_CHANGED
        return ""

    def _deregister(self) -> None:
        with self._lock:
            iid, gen = self._registration["instance_id"], self._generation
            was = self._state == "registered" or self._registered.is_set()
        if not was or gen == 0:
            return
        path = "/v1/services/" + urllib.parse.quote(iid, safe="")
        deadline = time.monotonic() + self._stop_timeout
        attempt = 0
        while True:
            try:
                self._client.request("DELETE", path, query={"generation": str(gen)})
                break
            except APIError as e:
                if e.status in (404, 410) or (e.status < 500 and e.status != 429):
                    log.info("deregistration: %s", e)
                    return
                wait = max(min(self._backoff.delay(attempt), 1.0), e.retry_after or 0.0)
            except TransportError:
                wait = min(self._backoff.delay(attempt), 1.0)
            attempt += 1
            if time.monotonic() + wait > deadline:
                log.warning("deregistration failed; the lease will expire")
                return
            time.sleep(wait)
        log.info("deregistered %s generation %d", iid, gen)
        self._await_drain(path + "/withdrawal", gen)

    def _await_drain(self, path: str, gen: int) -> None:
        """Waits until every live gateway applied the withdrawal, or the drain timeout: until
        then consumers may still send requests, so the provider keeps serving."""
        deadline = time.monotonic() + self._drain_timeout
        while time.monotonic() < deadline:
            try:
                _, w = self._client.request("GET", path, query={"generation": str(gen)})
                if w and w.get("acknowledged"):
                    return
            except APIError as e:
                if e.status == 404:
                    return
            except TransportError:
                pass
            time.sleep(0.05)
        log.warning("gave up waiting for the gateways to acknowledge the withdrawal")
