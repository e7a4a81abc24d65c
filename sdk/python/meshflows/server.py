"""ProviderServer serves a provider's side of the API: the capability endpoints the
orchestrator calls (validate, invoke), a health endpoint, and routes of the provider's own."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import tracecontext

#: The largest request body read; a larger one is 413.
MAX_BODY = 1 << 20

Handler = Callable[[Dict[str, Any]], Any]

_CAPABILITY_PATH = re.compile(r"^/v1/capabilities/([^/]+)/(validate|invoke)$")


class ProviderServer:
    """Serves POST /v1/capabilities/{id}/validate and /invoke for the capabilities given,
    GET health_path (naming instance_id, when given), and extra routes ``{("POST", "/api/webhook/send"): fn}`` (fn gets the JSON
    body and returns the JSON answer, or raises :class:`ValueError` for a 400).

    A validate function gets the request (workflow_name, step_id, step…) and returns a list of
    diagnostics ``{"severity", "code", "message", "path"}``; the answer's ``valid`` is false
    when one is an error. An invoke function gets the request (request, payload…) and returns
    the step's output. Errors are answered with the error body of the wire contract.

    A request's W3C ``traceparent`` is continued: inside a handler
    :func:`meshflows.tracecontext.current` is its trace with a span id of the provider's own,
    and requests the SDK sends from there carry it on.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, validate: Optional[Dict[str, Handler]] = None,
                 invoke: Optional[Dict[str, Handler]] = None, health_path: str = "/healthz",
                 routes: Optional[Dict[Tuple[str, str], Handler]] = None, instance_id: Optional[str] = None) -> None:
        self.validate = dict(validate or {})
        # named in the health answer: the registry's probe then refuses another process that
        # took this address (a zombie registration) instead of trusting its "ok"
        self.instance_id = instance_id
        self.invoke = dict(invoke or {})
        self.health_path = health_path
        self.routes = dict(routes or {})
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._serve(self, "GET")

            def do_POST(self) -> None:
                server._serve(self, "POST")

            def do_PUT(self) -> None:
                server._serve(self, "PUT")

            def do_DELETE(self) -> None:
                server._serve(self, "DELETE")

        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        """The port the server listens on (useful with port=0)."""
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The server's base URL, to register as the instance's endpoint."""
        host = self._httpd.server_address[0]
        return f"http://{host}:{self.port}"

    def start(self) -> "ProviderServer":
        """Serves on a background thread and returns at once."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="meshflows-provider-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join()

    def __enter__(self) -> "ProviderServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- serving ---------------------------------------------------------------------------

    @staticmethod
    def _write(h: BaseHTTPRequestHandler, status: int, body: Any, allow: Optional[str] = None) -> None:
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        if allow:
            h.send_header("Allow", allow)
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str, allow: Optional[str] = None) -> None:
        self._write(h, status, {"error": {"code": code, "message": message}}, allow)

    def _body(self, h: BaseHTTPRequestHandler) -> Optional[Dict[str, Any]]:
        try:
            n = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self._error(h, 413, "PAYLOAD_TOO_LARGE", f"a request body is at most {MAX_BODY} bytes")
            return None
        raw = h.rfile.read(n) if n else b"{}"
        try:
            body = json.loads(raw)
        except ValueError as e:
            self._error(h, 400, "INVALID_JSON", f"the body is not JSON: {e}")
            return None
        if not isinstance(body, dict):
            self._error(h, 400, "INVALID_JSON", "the body must be a JSON object")
            return None
        return body

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        # the caller's trace goes on: handlers see it as tracecontext.current(), and the calls
        # they make through the SDK carry it
        token = tracecontext._enter(tracecontext.from_headers(h.headers))
        try:
            self._route(h, method)
        finally:
            tracecontext._leave(token)

    def _route(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        try:
            if path == self.health_path:
                if method != "GET":
                    return self._error(h, 405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on {path}", "GET")
                body = {"status": "ok"}
                if self.instance_id:
                    body["instance_id"] = self.instance_id
                return self._write(h, 200, body)
            m = _CAPABILITY_PATH.match(path)
            if m:
                if method != "POST":
                    return self._error(h, 405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on {path}", "POST")
                return self._capability(h, m.group(1), m.group(2))
            fn = self.routes.get((method, path))
            if fn is None:
                allowed = sorted(meth for (meth, p) in self.routes if p == path)
                if allowed:
                    return self._error(h, 405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on {path}", ", ".join(allowed))
                return self._error(h, 404, "NOT_FOUND", f"no such endpoint: {method} {path}")
            body = self._body(h)
            if body is None:
                return
            try:
                return self._write(h, 200, fn(body))
            except ValueError as e:
                return self._error(h, 400, "INVALID_REQUEST", str(e))
        except Exception as e:  # a handler's bug answers 500, never kills the server
            try:
                self._error(h, 500, "INTERNAL", f"{type(e).__name__}: {e}")
            except Exception:
                pass

    def _capability(self, h: BaseHTTPRequestHandler, capability_id: str, op: str) -> None:
        fn = (self.validate if op == "validate" else self.invoke).get(capability_id)
        if fn is None:
            return self._error(h, 404, "NOT_FOUND", f"capability {capability_id!r} has no {op} endpoint here")
        req = self._body(h)
        if req is None:
            return
        try:
            out = fn(req)
        except ValueError as e:
            return self._error(h, 400, "INVALID_REQUEST", str(e))
        if op == "validate":
            diags: List[Dict[str, Any]] = list(out or [])
            return self._write(h, 200, {"valid": not any(d.get("severity") == "error" for d in diags), "diagnostics": diags})
        return self._write(h, 200, {"output": out})
