"""W3C Trace Context (https://www.w3.org/TR/trace-context/) with the standard library: a
provider served by :class:`ProviderServer` continues the trace of the gateway's or the
orchestrator's call, and the calls it makes through this SDK carry it on.

No span is exported from Python (an exporter is optional and not part of the SDK); what the
SDK keeps is the trace: inside a handler, :func:`current` is the request's context with a new
span id of its own, :func:`traceparent` the header to send on a call the handler makes, and
the SDK's own requests (registry, discovery) send it by themselves.
"""

import contextvars
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_current: contextvars.ContextVar[Optional["TraceContext"]] = contextvars.ContextVar("meshflows_trace", default=None)


@dataclass(frozen=True)
class TraceContext:
    """One span's place in a trace: ``trace_id`` (32 hex digits), ``span_id`` (16), the trace
    flags (``sampled``) and the vendor ``tracestate``, carried on unchanged."""
    trace_id: str
    span_id: str
    sampled: bool
    tracestate: str = ""

    def child(self) -> "TraceContext":
        """A new span of the same trace (a new span id)."""
        return TraceContext(self.trace_id, _new_id(8), self.sampled, self.tracestate)

    def traceparent(self) -> str:
        """The ``traceparent`` header naming this span as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    def headers(self) -> dict:
        """``traceparent`` and, when there is one, ``tracestate``."""
        h = {"traceparent": self.traceparent()}
        if self.tracestate:
            h["tracestate"] = self.tracestate
        return h


def _new_id(n: int) -> str:
    while True:
        v = os.urandom(n).hex()
        if v.strip("0"):
            return v


def parse(traceparent: Optional[str], tracestate: Optional[str] = None) -> Optional[TraceContext]:
    """The context a ``traceparent`` header names, or None when it is absent or invalid (as
    the recommendation says: version ff, ids of zeros, a malformed field, and for version 00
    anything after the flags are refused; a later version's extra fields are ignored)."""
    if not traceparent:
        return None
    m = _TRACEPARENT.match(traceparent.strip())
    if not m:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest) or not trace_id.strip("0") or not span_id.strip("0"):
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & 1), (tracestate or "").strip())


def from_headers(headers: Mapping[str, str]) -> Optional[TraceContext]:
    """The context of incoming request headers (case-insensitive, as ``http.server`` gives
    them)."""
    return parse(headers.get("traceparent"), headers.get("tracestate"))


def current() -> Optional[TraceContext]:
    """The trace of the request being handled on this thread (None outside a handler, or when
    the caller sent none)."""
    return _current.get()


def traceparent() -> Optional[str]:
    """The ``traceparent`` to send on a call made while handling a request (None outside)."""
    c = _current.get()
    return c.traceparent() if c else None


def _enter(ctx: Optional[TraceContext]) -> contextvars.Token:
    return _current.set(ctx.child() if ctx else None)


def _leave(token: contextvars.Token) -> None:
    _current.reset(token)
