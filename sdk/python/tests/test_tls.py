"""Certificates that rotate under a running client: TLSFiles reads its files again."""

import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import BIN, require_binary
from meshflows._client import RegistryClient, TLSFiles


class _WhoAmI(BaseHTTPRequestHandler):
    """Answers the common name of the client certificate the connection presented."""

    def log_message(self, *a):
        pass

    def do_GET(self):
        cert = self.connection.getpeercert() or {}
        cn = dict(x[0] for x in cert.get("subject", ())).get("commonName", "")
        body = ('{"cn": "%s"}' % cn).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class TLSFilesTest(unittest.TestCase):
    def setUp(self):
        require_binary(self)
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        for args in (["certs", "init", "--dir", self.dir], ["certs", "issue", "--dir", self.dir, "--identity", "first"],
                     ["certs", "issue", "--dir", self.dir, "--identity", "second"],
                     ["certs", "issue", "--dir", self.dir, "--identity", "shortlived", "--valid-for", "2s"]):
            subprocess.run([BIN, *args], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.path("server.pem"), self.path("server-key.pem"))
        ctx.load_verify_locations(self.path("ca.pem"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _WhoAmI)
        srv.daemon_threads = True
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.url = f"https://127.0.0.1:{srv.server_address[1]}"
        shutil.copy(self.path("first.pem"), self.path("client.pem"))
        shutil.copy(self.path("first-key.pem"), self.path("client-key.pem"))

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)

    def put(self, cert, key):
        """Replaces the client pair with cert and key, each by a rename, key first."""
        for src, dst in ((key, "client-key.pem"), (cert, "client.pem")):
            tmp = self.path(dst + ".tmp")
            shutil.copy(self.path(src), tmp)
            os.replace(tmp, self.path(dst))

    def test_a_rotated_certificate_is_used_by_new_connections(self):
        now = [0.0]
        files = TLSFiles(self.path("ca.pem"), self.path("client.pem"), self.path("client-key.pem"), reload_interval=10, clock=lambda: now[0])
        c = RegistryClient([self.url], context=files)
        self.assertEqual(c.request("GET", "/")[1]["cn"], "first")
        self.put("second.pem", "second-key.pem")
        self.assertEqual(c.request("GET", "/")[1]["cn"], "first", "reloaded before the interval")
        now[0] = 10
        self.assertEqual(c.request("GET", "/")[1]["cn"], "second")
        self.assertEqual(files.failures, 0)

    def test_bad_sets_are_refused_once_and_the_old_one_stays(self):
        files = TLSFiles(self.path("ca.pem"), self.path("client.pem"), self.path("client-key.pem"), reload_interval=0)
        c = RegistryClient([self.url], context=files)
        pem = self.read("first.pem")
        cases = [
            ("half-written", lambda: self.write("client.pem", pem[: len(pem) // 2])),
            ("a key of another certificate", lambda: self.write("client-key.pem", self.read("second-key.pem"))),
            ("an empty CA bundle", lambda: self.write("ca.pem", b"nothing here\n")),
        ]
        for name, damage in cases:
            with self.subTest(name):
                saved = {n: self.read(n) for n in ("ca.pem", "client.pem", "client-key.pem")}
                before = files.failures
                with self.assertLogs("meshflows.tls", "ERROR") as logs:
                    damage()
                    self.assertFalse(files.reload())
                self.assertEqual(len(logs.records), 1)
                self.assertFalse(files.reload(), "the same bad files again")
                self.assertEqual(files.failures, before + 1, "refused more than once")
                self.assertEqual(c.request("GET", "/")[1]["cn"], "first", "the set in force changed")
                for n, data in saved.items():
                    self.write(n, data)
        # an expired certificate: the short-lived one, once its two seconds are over
        time.sleep(2.1)
        self.put("shortlived.pem", "shortlived-key.pem")
        with self.assertLogs("meshflows.tls", "ERROR") as logs:
            self.assertFalse(files.reload())
        self.assertIn("expired", logs.output[0])
        self.assertEqual(c.request("GET", "/")[1]["cn"], "first")


if __name__ == "__main__":
    unittest.main()
