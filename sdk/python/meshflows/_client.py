"""A small JSON client of the registry API with failover between registry URLs.

It behaves as the Go ``client`` package: one registry at a time, the next one after a
transport error, a 5xx or a 429; the error body as :class:`APIError`; Retry-After kept.
"""

import email.utils
import http.client
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import tracecontext
from .errors import APIError, TransportError

#: The largest answer read (a discovery answer of a large fleet included).
MAX_ANSWER = 64 << 20


#: How often TLSFiles looks at its files, in seconds.
DEFAULT_TLS_RELOAD_INTERVAL = 10.0

_log = logging.getLogger("meshflows.tls")


def _not_after(cert_file: str) -> Optional[float]:
    """The expiry of the first certificate of cert_file (Unix seconds), when this Python can
    tell without a third-party library."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        return ssl.cert_time_to_seconds(decode(cert_file)["notAfter"])
    except (KeyError, ValueError, OSError, ssl.SSLError):
        return None


class TLSFiles:
    """The client side of (m)TLS read from files — the CA bundle the registry's certificate
    must chain to, the client certificate and its key — and read again when they change
    (cert-manager, spiffe-helper or Vault rewriting them): :meth:`context` returns a new
    :class:`ssl.SSLContext` once the files hold a new, valid set, and new connections use it.
    A changed set that does not load (a half-written file, a key of another certificate, an
    empty bundle) or whose certificate has expired is refused: the context in force stays,
    one ERROR log line says why and :attr:`failures` counts it. The first load must succeed.
    """

    def __init__(self, ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str],
                 reload_interval: float = DEFAULT_TLS_RELOAD_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        if bool(cert_file) != bool(key_file):
            raise ValueError("a client certificate needs both the certificate and the key file")
        self._files = (ca_file, cert_file, key_file)
        self._interval, self._clock, self._wall = reload_interval, clock, wall
        self._lock = threading.Lock()
        self.failures = 0
        raw = self._read()
        self._context = self._build(raw)
        self._raw, self._refused = raw, None
        self._checked = clock()

    def _read(self) -> Tuple[bytes, ...]:
        out = []
        for f in self._files:
            if not f:
                out.append(b"")
                continue
            with open(f, "rb") as fh:
                out.append(fh.read())
        return tuple(out)

    def _build(self, raw: Tuple[bytes, ...]) -> ssl.SSLContext:
        ca_file, cert_file, key_file = self._files
        ctx = ssl.create_default_context()
        if ca_file:
            ctx = ssl.create_default_context(cadata=raw[0].decode("ascii", "replace"))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert_file:
            ctx.load_cert_chain(cert_file, key_file)
            not_after = _not_after(cert_file)
            if not_after is not None and not_after <= self._wall():
                raise ValueError(f"client certificate {cert_file} expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(not_after))}")
        return ctx

    def reload(self) -> bool:
        """Reads the files and puts a changed, valid set in force; True when it did."""
        with self._lock:
            self._checked = self._clock()
            try:
                raw: Any = self._read()
                if raw == self._raw:
                    return False
                if raw == self._refused:
                    return False  # refused already, and said so
                ctx = self._build(raw)
            except (ssl.SSLError, ValueError, OSError) as e:
                if isinstance(e, OSError) and not isinstance(e, ssl.SSLError):
                    raw = str(e)  # a file that cannot be read: said once while it stays so
                    if raw == self._refused:
                        return False
                self._refused = raw
                self.failures += 1
                _log.error("client certificate files changed and were refused; the certificates in force stay: %s", e)
                return False
            self._context, self._raw, self._refused = ctx, raw, None
            _log.info("client certificates reloaded: new connections use them")
            return True

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: the files are looked at again when the reload
        interval has passed since the last look."""
        if self._clock() - self._checked >= self._interval:
            self.reload()
        return self._context


def ssl_context(ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str]) -> Optional[ssl.SSLContext]:
    """The client side of (m)TLS, read once: the CA the registry's certificate must chain to,
    and the client certificate that carries the caller's identity. None when nothing is given."""
    if not (ca_file or cert_file or key_file):
        return None
    return TLSFiles(ca_file, cert_file, key_file).context()


def tls_files(ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str],
              reload_interval: float = DEFAULT_TLS_RELOAD_INTERVAL) -> Optional[TLSFiles]:
    """TLSFiles for the files, or None when nothing is given (plain HTTP)."""
    if not (ca_file or cert_file or key_file):
        return None
    return TLSFiles(ca_file, cert_file, key_file, reload_interval)


def _retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class RegistryClient:
    """JSON requests against one of several registries, failing over to the next one."""

    def __init__(self, registries: Sequence[str], token: Optional[str] = None,
                 context: Union[ssl.SSLContext, TLSFiles, None] = None, timeout: float = 5.0) -> None:
        if not registries:
            raise ValueError("no registry URL")
        urls: List[str] = []
        for r in registries:
            u = urllib.parse.urlparse(r)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ValueError(f"registry URL {r!r}: want http(s)://host:port")
            urls.append(r.rstrip("/"))
        self._urls = urls
        self._cur = 0
        self._lock = threading.Lock()
        self._token = token
        self._context = context
        self.timeout = timeout

    @property
    def registry(self) -> str:
        """The base URL requests go to now."""
        with self._lock:
            return self._urls[self._cur]

    def _failover(self, base: str) -> None:
        with self._lock:
            if len(self._urls) > 1 and self._urls[self._cur] == base:
                self._cur = (self._cur + 1) % len(self._urls)

    def request(self, method: str, path: str, body: Any = None, query: Optional[Dict[str, str]] = None,
                timeout: Optional[float] = None) -> Tuple[int, Any]:
        """Sends one request and returns the status and the decoded JSON answer (None when
        empty). A non-2xx answer raises :class:`APIError`; a failure to reach the registry or a
        malformed answer raises :class:`TransportError`."""
        base = self.registry
        url = base + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        trace = tracecontext.current()  # a call made while handling a traced request carries its trace
        if trace:
            headers.update(trace.headers())
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            ctx = self._context.context() if isinstance(self._context, TLSFiles) else self._context
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=ctx) as resp:
                raw = resp.read(MAX_ANSWER + 1)
                status = resp.status
        except urllib.error.HTTPError as e:
            raw = e.read(MAX_ANSWER + 1) if e.fp else b""
            err = self._error(e.code, raw, e.headers.get("Retry-After") if e.headers else None)
            if e.code >= 500 or e.code == 429:
                self._failover(base)
            raise err from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
            self._failover(base)
            raise TransportError(f"{method} {url}: {e}") from None
        if len(raw) > MAX_ANSWER:
            self._failover(base)
            raise TransportError(f"{method} {url}: the answer is larger than {MAX_ANSWER} bytes")
        if not raw.strip():
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError as e:
            self._failover(base)
            raise TransportError(f"{method} {url}: the answer is not JSON: {e}") from None

    @staticmethod
    def _error(status: int, raw: bytes, retry_after: Optional[str]) -> APIError:
        code, message, details = "HTTP_" + str(status), raw[:200].decode("utf-8", "replace").strip(), None
        try:
            body = json.loads(raw)
            err = body.get("error") if isinstance(body, dict) else None
            if isinstance(err, dict) and err.get("code"):
                code, message, details = err["code"], err.get("message", ""), err.get("details")
        except ValueError:
            pass
        return APIError(status, code, message, details, _retry_after(retry_after))
