"""A small JSON client of the registry API with failover between registry URLs.

It behaves as the Go ``client`` package: one registry at a time, the next one after a
transport error, a 5xx or a 429; the error body as :class:`APIError`; Retry-After kept.
"""

import email.utils
import http.client
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import APIError, TransportError

#: The largest answer read (a discovery answer of a large fleet included).
MAX_ANSWER = 64 << 20


def ssl_context(ca_file: Optional[str], cert_file: Optional[str], key_file: Optional[str]) -> Optional[ssl.SSLContext]:
    """The client side of (m)TLS: the CA the registry's certificate must chain to, and the
    client certificate that carries the caller's identity. None when nothing is given."""
    if not (ca_file or cert_file or key_file):
        return None
    ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


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

    def __init__(self, registries: Sequence[str], token: Optional[str] = None, context: Optional[ssl.SSLContext] = None,
                 timeout: float = 5.0) -> None:
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
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._context) as resp:
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
