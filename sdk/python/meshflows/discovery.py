"""The discovery client: capability queries answered from a cache with a last-known-good view,
as the Go ``discovery`` package does."""

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._client import RegistryClient, ssl_context
from .errors import APIError, TransportError

# The states of a view.
UNINITIALIZED = "uninitialized"
FRESH = "fresh"
AUTHORITATIVE_EMPTY = "authoritative_empty"
STALE = "stale"
EXPIRED = "expired"


class RegistryUnavailable(Exception):
    """Discovery has nothing to serve: the registry did not answer and no last-known-good view
    is young enough (or there never was one). It is never turned into an empty list."""

    def __init__(self, state: str, cause: Optional[BaseException]) -> None:
        super().__init__(f"discovery unavailable ({state}): {cause}")
        self.state = state
        self.cause = cause


class _View:
    def __init__(self) -> None:
        self.epoch = ""
        self.revision = -1
        self.complete = False
        self.entries: Optional[List[Dict[str, Any]]] = None  # the last-known-good answer
        self.fetched_at = 0.0  # when the registry last answered (monotonic)
        self.error: Optional[BaseException] = None


class DiscoveryClient:
    """Answers capability queries through the registry, caching each query's answer for ttl
    seconds and serving the last-known-good answer for max_stale seconds while the registry
    cannot be reached. An answer never replaces a newer one of the same epoch; an incomplete
    answer (a registry still warming up after a restart) is merged into what the view held,
    minus what the registry says it removed. Semver constraints are evaluated by the registry.
    """

    def __init__(self, registries: Sequence[str], ttl: float = 30.0, max_stale: float = 600.0,
                 token: Optional[str] = None, ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, request_timeout: float = 5.0) -> None:
        self._client = RegistryClient(registries, token=token, context=ssl_context(ca_file, cert_file, key_file),
                                      timeout=request_timeout)
        self.ttl = ttl
        self.max_stale = max_stale
        self._lock = threading.Lock()
        self._views: Dict[Tuple[Tuple[str, str], ...], _View] = {}
        self._last_state = UNINITIALIZED

    @property
    def state(self) -> str:
        """The state of the last answer: uninitialized (nothing to serve yet), fresh,
        authoritative_empty (the registry, complete, has none), stale (last-known-good, the
        registry unreachable) or expired (too old to serve)."""
        with self._lock:
            return self._last_state

    def _state_of(self, v: _View) -> str:
        if v.entries is None:
            return UNINITIALIZED
        age = time.monotonic() - v.fetched_at
        if v.error is None and age <= self.ttl:
            return AUTHORITATIVE_EMPTY if not v.entries and v.complete else FRESH
        return STALE if age <= self.max_stale else EXPIRED

    def invalidate(self) -> None:
        """Drops the freshness of every view: the next query asks the registry."""
        with self._lock:
            for v in self._views.values():
                v.fetched_at = min(v.fetched_at, time.monotonic() - self.ttl - 1)

    def capabilities(self, capability_id: str, constraint: Optional[str] = None, provider: Optional[str] = None,
                     zone: Optional[str] = None) -> List[Dict[str, Any]]:
        """The entries of the instances that offer capability_id (with the version constraint,
        provider and zone when given), in the registry's order. Raises RegistryUnavailable when
        there is nothing to serve."""
        q = {"capability_id": capability_id}
        if constraint:
            q["version"] = constraint
        if provider:
            q["provider"] = provider
        if zone:
            q["zone"] = zone
        key = tuple(sorted(q.items()))
        with self._lock:
            v = self._views.setdefault(key, _View())
            if v.entries is not None and v.error is None and time.monotonic() - v.fetched_at <= self.ttl:
                self._last_state = self._state_of(v)
                return list(v.entries)
        try:
            _, ans = self._client.request("GET", "/v1/discovery/capabilities", query=q)
            if not isinstance(ans, dict) or not ans.get("registry_epoch") or not isinstance(ans.get("capabilities"), list):
                raise TransportError("the discovery answer has no registry_epoch or capabilities")
        except (APIError, TransportError) as e:
            with self._lock:
                v.error = e
                st = self._last_state = self._state_of(v)
                if st == STALE:
                    return list(v.entries or [])
                raise RegistryUnavailable(st, e) from None
        with self._lock:
            self._apply(v, ans)
            self._last_state = AUTHORITATIVE_EMPTY if not v.entries and v.complete else FRESH
            return list(v.entries or [])

    def _apply(self, v: _View, ans: Dict[str, Any]) -> None:
        epoch, revision, complete = ans["registry_epoch"], int(ans.get("revision", 0)), bool(ans.get("complete"))
        entries = ans["capabilities"]
        if v.entries is not None and epoch == v.epoch and revision < v.revision:
            v.fetched_at, v.error = time.monotonic(), None  # an older answer of the same epoch: keep ours
            return
        if not complete and v.entries is not None:
            # A registry warming up may lack live instances: keep what we knew, minus what it
            # says it removed, plus what it answers.
            removed = {r.get("instance_id") for r in ans.get("removed") or []}
            have = {(e.get("instance_id"), e.get("capability_id"), e.get("capability_version"), e.get("provider")) for e in entries}
            kept = [e for e in v.entries if e.get("instance_id") not in removed and
                    (e.get("instance_id"), e.get("capability_id"), e.get("capability_version"), e.get("provider")) not in have]
            entries = entries + kept
        v.epoch, v.revision, v.complete, v.entries = epoch, revision, complete, entries
        v.fetched_at, v.error = time.monotonic(), None
