"""The discovery client: capability queries answered from a cache with a last-known-good view,
as the Go ``discovery`` package does."""

import collections
import functools
import json
import random
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._client import DEFAULT_TLS_RELOAD_INTERVAL, RegistryClient, tls_files
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


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def _version(s: Any) -> Optional[Tuple[int, int, int, Optional[List[str]]]]:
    m = _SEMVER.match(s) if isinstance(s, str) else None
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4).split(".") if m.group(4) else None


def _compare_versions(a: Any, b: Any) -> int:
    """Semantic version precedence of two parsed versions; None (unparsable) lowest."""
    if a is None or b is None:
        return (a is not None) - (b is not None)
    for x, y in zip(a[:3], b[:3]):
        if x != y:
            return -1 if x < y else 1
    pa, pb = a[3], b[3]
    if pa is None or pb is None:
        return (pa is None) - (pb is None)  # a release follows its pre-releases
    for x, y in zip(pa, pb):
        if x == y:
            continue
        xn, yn = x.isdigit(), y.isdigit()
        if xn and yn:
            return -1 if int(x) < int(y) else 1
        if xn != yn:
            return -1 if xn else 1  # numeric identifiers come first
        return -1 if x < y else 1
    return (len(pa) > len(pb)) - (len(pa) < len(pb))


def _priority(e: Dict[str, Any]) -> int:
    p = (e.get("metadata") or {}).get("priority") if isinstance(e.get("metadata"), dict) else None
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


def _entry_order(a: Dict[str, Any], b: Dict[str, Any]) -> int:
    """The registry's order of a discovery answer: capability_id, provider, priority
    descending, capability_version descending, generation ascending."""
    for k in ("capability_id", "provider"):
        if a.get(k) != b.get(k):
            return -1 if (a.get(k) or "") < (b.get(k) or "") else 1
    pa, pb = _priority(a), _priority(b)
    if pa != pb:
        return -1 if pa > pb else 1
    c = _compare_versions(_version(b.get("capability_version")), _version(a.get("capability_version")))
    if c:
        return c
    ga, gb = int(a.get("generation") or 0), int(b.get("generation") or 0)
    return (ga > gb) - (ga < gb)


def _entry_key(e: Dict[str, Any]) -> Tuple[Any, Any, Any, Any]:
    return e.get("instance_id"), e.get("capability_id"), e.get("provider"), e.get("capability_version")


def apply_delta(held: List[Dict[str, Any]], delta: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The answer a delta watcher holds after delta (the registry's delta=true answer), given
    what it held: the reset's capabilities, or held without each removed instance's entries at
    or below the generation named, with added and updated put in place, in the registry's
    order."""
    if delta.get("reset"):
        return list(delta.get("capabilities") or [])
    gone: Dict[Any, int] = {}
    for r in delta.get("removed") or []:
        gone[r.get("instance_id")] = max(gone.get(r.get("instance_id"), 0), int(r.get("generation") or 0))
    out: Dict[Tuple[Any, Any, Any, Any], Dict[str, Any]] = {}
    for e in held:
        g = gone.get(e.get("instance_id"))
        if g is not None and int(e.get("generation") or 0) <= g:
            continue
        out[_entry_key(e)] = e
    for e in list(delta.get("added") or []) + list(delta.get("updated") or []):
        out[_entry_key(e)] = e
    return sorted(out.values(), key=functools.cmp_to_key(_entry_order))


class _View:
    def __init__(self) -> None:
        self.epoch = ""
        self.revision = -1
        self.complete = False
        self.entries: Optional[List[Dict[str, Any]]] = None  # the last-known-good answer
        self.fetched_at = 0.0  # when the registry last answered (monotonic)
        self.error: Optional[BaseException] = None
        self.watchers = 0  # watch() loops keeping it current: a watched view is never evicted


class DiscoveryClient:
    """Answers capability queries through the registry, caching each query's answer for ttl
    seconds and serving the last-known-good answer while the registry cannot be reached: for
    as long as it is away by default (max_stale None: the view is authoritative for routing),
    or for max_stale seconds. A query may declare its own, stricter max_stale (an operation
    that needs prompt revocation); the stricter bound applies to it alone. An answer never replaces a newer one of the same epoch; an incomplete
    answer (a registry still warming up after a restart) is merged into what the view held,
    minus what the registry says it removed. Semver constraints are evaluated by the registry.
    At most max_views queries' views are kept (default 1,000): past it the least recently read
    one is dropped (never one a watch() keeps), and evicted counts them.
    """

    def __init__(self, registries: Sequence[str], ttl: float = 30.0, max_stale: Optional[float] = None,
                 token: Optional[str] = None, ca_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, request_timeout: float = 5.0, max_views: int = 1000,
                 tls_reload_interval: float = DEFAULT_TLS_RELOAD_INTERVAL) -> None:
        self._client = RegistryClient(registries, token=token, context=tls_files(ca_file, cert_file, key_file, tls_reload_interval),
                                      timeout=request_timeout)
        self.ttl = ttl
        self.max_stale = max_stale
        self._lock = threading.Lock()
        # one view per distinct query, least recently read first; at most max_views of them
        # (0 or less: no bound), the least recently read one dropped first, never a watched one
        self._views: "collections.OrderedDict[Tuple[Tuple[str, str], ...], _View]" = collections.OrderedDict()
        self.max_views = max_views
        self.evicted = 0  # views dropped to keep max_views
        self._last_state = UNINITIALIZED

    @property
    def state(self) -> str:
        """The state of the last answer: uninitialized (nothing to serve yet), fresh,
        authoritative_empty (the registry, complete, has none), stale (last-known-good, the
        registry unreachable) or expired (too old to serve)."""
        with self._lock:
            return self._last_state

    def _state_of(self, v: _View, max_stale: Optional[float] = None) -> str:
        if v.entries is None:
            return UNINITIALIZED
        age = time.monotonic() - v.fetched_at
        if v.error is None and age <= self.ttl:
            return AUTHORITATIVE_EMPTY if not v.entries and v.complete else FRESH
        bounds = [b for b in (self.max_stale, max_stale) if b is not None and b > 0]
        return STALE if not bounds or age <= min(bounds) else EXPIRED

    def invalidate(self) -> None:
        """Drops the freshness of every view: the next query asks the registry."""
        with self._lock:
            for v in self._views.values():
                v.fetched_at = min(v.fetched_at, time.monotonic() - self.ttl - 1)

    def _view_of(self, capability_id: str, constraint: Optional[str], provider: Optional[str],
                 zone: Optional[str]) -> Tuple[Dict[str, str], _View]:
        """The query's parameters and its view (made empty the first time)."""
        q = {"capability_id": capability_id}
        if constraint:
            q["version"] = constraint
        if provider:
            q["provider"] = provider
        if zone:
            q["zone"] = zone
        key = tuple(sorted(q.items()))
        with self._lock:
            v = self._views.get(key)
            if v is None:
                v = self._views[key] = _View()
                if 0 < self.max_views < len(self._views):
                    for k, old in self._views.items():
                        if k != key and old.watchers == 0:
                            del self._views[k]
                            self.evicted += 1
                            break
            self._views.move_to_end(key)
            return q, v

    def capabilities(self, capability_id: str, constraint: Optional[str] = None, provider: Optional[str] = None,
                     zone: Optional[str] = None, max_stale: Optional[float] = None) -> List[Dict[str, Any]]:
        """The entries of the instances that offer capability_id (with the version constraint,
        provider and zone when given), in the registry's order. Raises RegistryUnavailable when
        there is nothing to serve, or when the registry is away and the last-known-good view is
        older than max_stale seconds (this query's own bound; the client's applies too)."""
        q, v = self._view_of(capability_id, constraint, provider, zone)
        with self._lock:
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
                st = self._last_state = self._state_of(v, max_stale)
                if st == STALE:
                    return list(v.entries or [])
                raise RegistryUnavailable(st, e) from None
        with self._lock:
            self._apply(v, ans)
            self._last_state = AUTHORITATIVE_EMPTY if not v.entries and v.complete else FRESH
            return list(v.entries or [])

    def watch(self, capability_id: str, on_change: Optional[Callable[[List[Dict[str, Any]]], None]] = None,
              stop: Optional[threading.Event] = None, constraint: Optional[str] = None, provider: Optional[str] = None,
              zone: Optional[str] = None, wait: float = 30.0) -> None:
        """Keeps the view of the query current until stop is set, in the calling thread (run it
        in a thread of its own): a loop of delta long polls (delta=true) that ask for the
        changes since the answer the view holds, rebuild the registry's answer from them and
        apply it as capabilities() applies an answer (merged while the registry warms up).
        on_change gets the entries after every change. Failures are retried after a jittered
        backoff (0.1 s doubling to 5 s; a 429's Retry-After and up to as much again); meanwhile capabilities() serves the last-known-good
        view by the usual rules. A registry that refuses delta=true is watched with whole
        answers."""
        stop = stop or threading.Event()
        q, v = self._view_of(capability_id, constraint, provider, zone)
        with self._lock:
            v.watchers += 1
        try:
            self._watch(q, v, on_change, stop, wait)
        finally:
            with self._lock:
                v.watchers -= 1

    def _watch(self, q: Dict[str, str], v: "_View", on_change: Optional[Callable[[List[Dict[str, Any]]], None]],
               stop: threading.Event, wait: float) -> None:
        held: Optional[List[Dict[str, Any]]] = None
        epoch, revision, delta, failures = "", 0, True, 0
        while not stop.is_set():
            query = dict(q)
            if held is not None:
                query.update(index=str(revision), wait=f"{wait:g}s", epoch=epoch)
            if delta:
                query["delta"] = "true"
                query.setdefault("index", "0")
                query.setdefault("wait", "0.000000001s")
            try:
                _, ans = self._client.request("GET", "/v1/discovery/capabilities", query=query,
                                              timeout=self._client.timeout + (wait if held is not None else 0))
                if not isinstance(ans, dict) or not ans.get("registry_epoch"):
                    raise TransportError("the discovery answer has no registry_epoch")
                if delta:
                    if not ans.get("reset") and ans["registry_epoch"] != epoch:
                        raise TransportError("a delta of another epoch than the answer held")
                    held = apply_delta(held or [], ans)
                else:
                    if not isinstance(ans.get("capabilities"), list):
                        raise TransportError("the discovery answer has no capabilities")
                    held = ans["capabilities"]
            except APIError as e:
                if delta and e.status == 400 and e.code == "UNKNOWN_PARAMETER":
                    delta = False  # a registry that predates delta watches
                    continue
                failures = self._watch_failed(v, e, failures, stop)
                continue
            except TransportError as e:
                failures = self._watch_failed(v, e, failures, stop)
                continue
            failures = 0
            epoch, revision = ans["registry_epoch"], int(ans.get("revision") or 0)
            whole = {"registry_epoch": epoch, "revision": revision, "complete": bool(ans.get("complete")),
                     "capabilities": held, "removed": ans.get("removed") or []}
            with self._lock:
                before = (v.epoch, v.revision, v.complete, json.dumps(v.entries, sort_keys=True) if v.entries is not None else None)
                self._apply(v, whole)
                changed = before != (v.epoch, v.revision, v.complete, json.dumps(v.entries, sort_keys=True))
                entries = list(v.entries or [])
            if changed and on_change is not None:
                on_change(entries)

    def _watch_failed(self, v: _View, e: BaseException, failures: int, stop: threading.Event) -> int:
        with self._lock:
            v.error = e
        failures += 1
        retry_after = getattr(e, "retry_after", None)
        if retry_after and retry_after > 0:
            # shed over the registry's reconnection cap: its Retry-After and up to as much
            # again at random, so that watchers shed together come back spread out
            stop.wait(retry_after + random.random() * retry_after)
        else:
            stop.wait(random.random() * min(0.1 * 2 ** min(failures - 1, 6), 5.0))
        return failures

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


IN_ROTATION = ("serving", "slow_start", "degraded", "returning")


def ready(entries: List[Dict[str, Any]]) -> bool:
    """Whether a region's answer is ready to take traffic: an instance in rotation, and no
    group of it in panic."""
    if any(e.get("panic") for e in entries):
        return False
    return any(e.get("eligibility") in IN_ROTATION for e in entries)


class RegionalDiscoveryClient:
    """Answers capability queries region by region: one DiscoveryClient per region (home's
    included), each with its own cache and last-known-good view of its own region's registry,
    never merged. A query is answered by the home region while it is on and ready (an
    instance in rotation, no panic), else by the next region of priority that is; when none
    is, by home's own answer, or, with home off, by the first region on that has any instance.
    on(region) says whether a region takes traffic: the routing control's signal, which the
    caller follows (default: every region on). capabilities() returns the region that
    answered with the entries."""

    def __init__(self, home: str, clients: Dict[str, "DiscoveryClient"], priority: Optional[Sequence[str]] = None,
                 on: Optional[Callable[[str], bool]] = None) -> None:
        if home not in clients:
            raise ValueError(f"no client for the home region {home!r}")
        order = [home]
        for r in priority or []:
            if r not in clients:
                raise ValueError(f"the priority names region {r!r}, which has no client")
            if r not in order:
                order.append(r)
        order += sorted(r for r in clients if r not in order)
        self.home = home
        self.order = order
        self.clients = dict(clients)
        self._on = on or (lambda region: True)

    def capabilities(self, capability_id: str, constraint: Optional[str] = None, provider: Optional[str] = None,
                     zone: Optional[str] = None, max_stale: Optional[float] = None) -> Tuple[str, List[Dict[str, Any]]]:
        """(region, entries) for the query, by the rule above. Raises RegistryUnavailable
        when no region that is on can answer."""
        answers: Dict[str, Any] = {}

        def get(region: str) -> Any:
            if region not in answers:
                try:
                    answers[region] = self.clients[region].capabilities(capability_id, constraint, provider, zone, max_stale)
                except RegistryUnavailable as e:
                    answers[region] = e
            return answers[region]

        for r in self.order:
            if self._on(r):
                a = get(r)
                if not isinstance(a, RegistryUnavailable) and ready(a):
                    return r, a
        candidates = [self.home] if self._on(self.home) else [r for r in self.order if self._on(r)]
        last: Optional[RegistryUnavailable] = None
        for r in candidates:
            a = get(r)
            if isinstance(a, RegistryUnavailable):
                last = a
                continue
            if a or r == self.home:
                return r, a
        if last is not None:
            raise last
        return self.home, []
