"""W3C Trace Context: a provider's handlers continue the caller's trace and the SDK's own
requests carry it on."""

import json
import threading
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import free_port
from meshflows import ProviderServer, tracecontext
from meshflows._client import RegistryClient

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class ParseTest(unittest.TestCase):
    def test_parse(self):
        cases = [
            ("a sampled parent", CALLER, ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", True)),
            ("not sampled", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", False)),
            ("a later version's extra field is ignored", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what", ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", True)),
            ("version ff", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", None),
            ("version 00 with more", CALLER + "-extra", None),
            ("a zero trace id", "00-00000000000000000000000000000000-b7ad6b7169203331-01", None),
            ("a zero span id", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", None),
            ("upper case", CALLER.upper(), None),
            ("short", "00-0af7651916cd43dd-b7ad6b7169203331-01", None),
            ("absent", None, None),
        ]
        for name, header, want in cases:
            with self.subTest(name):
                got = tracecontext.parse(header)
                self.assertEqual(want, None if got is None else (got.trace_id, got.span_id, got.sampled))

    def test_child_keeps_the_trace(self):
        parent = tracecontext.parse(CALLER, "vendor=1")
        child = parent.child()
        self.assertEqual(child.trace_id, parent.trace_id)
        self.assertNotEqual(child.span_id, parent.span_id)
        self.assertEqual(child.headers(), {"traceparent": f"00-{parent.trace_id}-{child.span_id}-01", "tracestate": "vendor=1"})


class _Recorder(BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        _Recorder.seen.append(self.headers.get("traceparent"))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ServerTest(unittest.TestCase):
    def test_a_handler_continues_the_callers_trace_and_passes_it_on(self):
        downstream = ThreadingHTTPServer(("127.0.0.1", free_port()), _Recorder)
        threading.Thread(target=downstream.serve_forever, daemon=True).start()
        self.addCleanup(downstream.server_close)
        self.addCleanup(downstream.shutdown)
        client = RegistryClient([f"http://127.0.0.1:{downstream.server_address[1]}"])
        seen = {}

        def invoke(req):
            seen["trace"] = tracecontext.current()
            client.request("GET", "/v1/anything")
            return {"ok": True}

        with ProviderServer(port=free_port(), invoke={"orders.place": invoke}) as srv:
            for header in (CALLER, None):
                _Recorder.seen.clear()
                headers = {"Content-Type": "application/json"}
                if header:
                    headers["traceparent"] = header
                req = urllib.request.Request(srv.url + "/v1/capabilities/orders.place/invoke", data=json.dumps({"request": {}}).encode(),
                                             method="POST", headers=headers)
                with urllib.request.urlopen(req, timeout=5) as resp:
                    self.assertEqual(resp.status, 200)
                if header:
                    t = seen["trace"]
                    self.assertEqual(t.trace_id, "0af7651916cd43dd8448eb211c80319c")
                    self.assertNotEqual(t.span_id, "b7ad6b7169203331")  # the provider's own span
                    self.assertEqual(_Recorder.seen, [t.traceparent()])
                else:
                    self.assertIsNone(seen["trace"])
                    self.assertEqual(_Recorder.seen, [None])
        self.assertIsNone(tracecontext.current())


if __name__ == "__main__":
    unittest.main()
