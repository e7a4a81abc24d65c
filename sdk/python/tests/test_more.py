"""Discovery merges, hostile TLS and huge answers, and a degraded Python provider in the
gateway's picks."""

import json
import os
import subprocess
import tempfile
import threading
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import meshflows._client as client_mod
from harness import BIN, Registry, eventually, free_port, require_binary
from meshflows import Agent, Capability, DiscoveryClient, ProviderServer, RegistryUnavailable


def serve(answers):
    """A fake registry answering discovery with the next of answers (dicts), then the last."""
    state = {"i": 0}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            ans = answers[min(state["i"], len(answers) - 1)]
            state["i"] += 1
            body = json.dumps(ans).encode() if isinstance(ans, dict) else ans
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def entry(iid):
    return {"instance_id": iid, "capability_id": "x.y", "capability_version": "1.0.0", "provider": "p"}


class DiscoveryMergeTest(unittest.TestCase):
    def test_warm_up_answers_merge_and_order(self):
        answers = [
            {"registry_epoch": "e1", "revision": 5, "complete": True, "capabilities": [entry("a"), entry("b")]},
            # a restarted registry warming up: knows only c, says b was removed
            {"registry_epoch": "e2", "revision": 1, "complete": False, "capabilities": [entry("c")],
             "removed": [{"instance_id": "b", "generation": 1}]},
            # an older answer of the same epoch (a replica behind): ignored
            {"registry_epoch": "e2", "revision": 0, "complete": True, "capabilities": []},
        ]
        srv = serve(answers)
        self.addCleanup(srv.shutdown)
        c = DiscoveryClient([f"http://127.0.0.1:{srv.server_address[1]}"], ttl=0)
        self.assertEqual([e["instance_id"] for e in c.capabilities("x.y")], ["a", "b"])
        self.assertEqual(sorted(e["instance_id"] for e in c.capabilities("x.y")), ["a", "c"])
        self.assertEqual(sorted(e["instance_id"] for e in c.capabilities("x.y")), ["a", "c"], "an older revision replaced a newer view")

    def test_answers_that_are_not_the_contract(self):
        for name, body in [("not json", b"<html>"), ("no epoch", json.dumps({"capabilities": []}).encode()),
                           ("truncated", b'{"registry_epoch": "e", "capab')]:
            with self.subTest(name):
                srv = serve([body])
                self.addCleanup(srv.shutdown)
                with self.assertRaises(RegistryUnavailable):
                    DiscoveryClient([f"http://127.0.0.1:{srv.server_address[1]}"]).capabilities("x.y")

    def test_huge_answer(self):
        srv = serve([b'{"registry_epoch": "e", "capabilities": [' + b'{"a": 1},' * 2000 + b'{}]}'])
        self.addCleanup(srv.shutdown)
        old = client_mod.MAX_ANSWER
        client_mod.MAX_ANSWER = 1000
        self.addCleanup(setattr, client_mod, "MAX_ANSWER", old)
        with self.assertRaises(RegistryUnavailable) as cm:
            DiscoveryClient([f"http://127.0.0.1:{srv.server_address[1]}"]).capabilities("x.y")
        self.assertIn("larger than", str(cm.exception))


class WrongCATest(unittest.TestCase):
    def test_wrong_ca_backs_off(self):
        require_binary(self)
        d1, d2 = tempfile.mkdtemp(), tempfile.mkdtemp()
        for d in (d1, d2):
            subprocess.run([BIN, "certs", "init", "--dir", d], check=True, capture_output=True)
        rbac = os.path.join(d1, "rbac.yaml")
        with open(rbac, "w") as f:
            f.write("identities: {ops: [admin]}\nroles: {admin: {admin: true}}\n")
        import ssl
        registry = Registry("--tls-cert", os.path.join(d1, "server.pem"), "--tls-key", os.path.join(d1, "server-key.pem"),
                            "--client-ca", os.path.join(d1, "ca.pem"), "--rbac", rbac, insecure=False, scheme="https",
                            context=ssl.create_default_context(cafile=os.path.join(d1, "ca.pem")))
        self.addCleanup(registry.stop)
        agent = Agent(registries=[registry.url], instance_id="py-wrong-ca", service_name="egress-webhook", service_version="0.1.0",
                      endpoint="http://127.0.0.1:9", capabilities=[Capability("webhook.send", "1.0.0", provider="webhook")],
                      ca_file=os.path.join(d2, "ca.pem"))  # another CA: the handshake fails
        with agent:
            eventually("backing off on a certificate it cannot verify", lambda: agent.state == "backing_off")
            self.assertFalse(agent.wait_registered(0.2))
        with self.assertRaises(RegistryUnavailable):
            DiscoveryClient([registry.url], ca_file=os.path.join(d2, "ca.pem")).capabilities("webhook.send")


class GatewayPicksTest(unittest.TestCase):
    def test_degraded_python_provider_gets_half_the_traffic(self):
        require_binary(self)
        registry = Registry()
        self.addCleanup(registry.stop)
        policy = os.path.join(tempfile.mkdtemp(), "policy.yaml")
        with open(policy, "w") as f:
            f.write("path_prefixes: {egress-webhook: [/api/webhook]}\n")
        gw_port = free_port()
        log = tempfile.TemporaryFile()
        gw = subprocess.Popen([BIN, "gateway", "--insecure", "--registry", registry.url, "--listen", f"127.0.0.1:{gw_port}",
                               "--policy", policy, "--log-level", "error"], stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(gw.wait)
        self.addCleanup(gw.terminate)
        agents = {}
        for name in ("a", "b"):
            server = ProviderServer(port=0, routes={("POST", "/api/webhook/send"): (lambda name: lambda body: {"by": name})(name)}).start()
            self.addCleanup(server.stop)
            iid = "py-" + name
            agent = Agent(registries=[registry.url], instance_id=iid, service_name="egress-webhook", service_version="0.1.0",
                          endpoint=server.url, capabilities=[Capability("webhook.send", "1.0.0", provider="webhook")],
                          manifest={"farp": "1.0", "service": {"name": "egress-webhook", "instance": iid, "version": "0.1.0"},
                                    "routes": [{"path": "/api/webhook/send", "methods": ["POST"]}]}, drain_timeout=0.5)
            agent.start()
            self.addCleanup(agent.stop, 5)
            agents[name] = agent
        for a in agents.values():
            self.assertTrue(a.wait_registered(10))

        def picks(n):
            out = {}
            for _ in range(n):
                req = urllib.request.Request(f"http://127.0.0.1:{gw_port}/api/webhook/send", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
                by = json.loads(urllib.request.urlopen(req, timeout=5).read())["by"]
                out[by] = out.get(by, 0) + 1
            return out

        eventually("both serve at 100 through the gateway", lambda: picks(20) == {"a": 10, "b": 10}, timeout=20)
        agents["b"].set_health("degraded")
        eventually("b, degraded, gets half of a's share", lambda: picks(30) == {"a": 20, "b": 10}, timeout=20)


class ViewBoundTest(unittest.TestCase):
    def test_views_are_bounded_least_recently_read_first(self):
        c = DiscoveryClient(["http://127.0.0.1:1"], max_views=3)
        _, watched = c._view_of("w.w", None, None, None)
        watched.watchers = 1  # as watch() holds it
        for cap in ["a.a", "b.b", "a.a", "c.c", "d.d"]:  # c evicts b (a read again since), d evicts a
            c._view_of(cap, None, None, None)
        held = sorted(dict(k)["capability_id"] for k in c._views)
        self.assertEqual(held, ["c.c", "d.d", "w.w"])
        self.assertEqual(c.evicted, 2)


if __name__ == "__main__":
    unittest.main()


class WatchTest(unittest.TestCase):
    def setUp(self):
        require_binary(self)

    def _register(self, reg, iid, version="1.0.0", priority=None):
        meta = {"priority": priority} if priority is not None else {}
        body = {"instance_id": iid, "service_name": "svc", "service_version": "1.0.0", "endpoint": f"http://{iid}:8080",
                "capabilities": [{"capability_id": "x.y", "capability_version": version, "contract_schema_version": "1.0",
                                  "provider": "p", "metadata": meta}]}
        req = urllib.request.Request(reg.url + "/v1/services/register", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())["generation"]

    def test_watch_with_deltas_holds_the_whole_answer(self):
        reg = Registry()
        self.addCleanup(reg.stop)
        c = DiscoveryClient([reg.url], ttl=60)
        seen = []
        stop = threading.Event()
        t = threading.Thread(target=c.watch, args=("x.y",), kwargs={"on_change": seen.append, "stop": stop, "wait": 1.0}, daemon=True)
        t.start()
        self.addCleanup(t.join, 5)
        self.addCleanup(stop.set)
        # the watch holds its first (empty) answer before the fleet changes, so what follows
        # reaches it as deltas rather than in the first, whole answer
        eventually("the watch holds its first answer", lambda: bool(seen))
        self._register(reg, "a", "1.0.0")
        self._register(reg, "b", "2.0.0")
        self._register(reg, "c", "1.0.0", priority=5)
        gen = self._register(reg, "d", "1.0.0-rc.1")
        urllib.request.urlopen(urllib.request.Request(f"{reg.url}/v1/services/d?generation={gen}", method="DELETE"), timeout=5).close()

        def same():
            full = [e["instance_id"] for e in get_full(reg)]
            return bool(seen) and [e["instance_id"] for e in seen[-1]] == full and full == ["c", "b", "a"]
        eventually("the watched view equals the whole answer, in its order", same)
        # the view is what capabilities() serves, and the registry answered deltas
        self.assertEqual([e["instance_id"] for e in c.capabilities("x.y")], ["c", "b", "a"])
        def answered_deltas():
            with urllib.request.urlopen(reg.url + "/metrics", timeout=5) as resp:
                metrics = resp.read().decode()
            deltas = [line for line in metrics.splitlines()
                      if line.startswith('meshflows_registry_discovery_deltas_total{kind="delta"}')]
            return bool(deltas) and float(deltas[0].split()[-1]) > 0
        eventually("the registry answered the watch with deltas", answered_deltas)

    def test_apply_delta_orders_as_the_registry(self):
        held = [dict(entry("a"), generation=1), dict(entry("b"), generation=2)]
        delta = {"registry_epoch": "e", "revision": 7, "complete": True,
                 "added": [dict(entry("c"), generation=3, capability_version="1.10.0"),
                           dict(entry("d"), generation=4, capability_version="1.2.0-alpha.10")],
                 "updated": [dict(entry("b"), generation=2, weight=50)],
                 "removed": [{"instance_id": "a", "generation": 1}]}
        from meshflows.discovery import apply_delta
        out = apply_delta(held, delta)
        self.assertEqual([(e["instance_id"], e.get("weight")) for e in out], [("c", None), ("d", None), ("b", 50)])
        self.assertEqual(apply_delta(out, {"reset": True, "capabilities": [entry("z")]}), [entry("z")])


def get_full(reg):
    with urllib.request.urlopen(reg.url + "/v1/discovery/capabilities?capability_id=x.y", timeout=5) as resp:
        return json.loads(resp.read())["capabilities"]


class HealthNamesTheInstanceTest(unittest.TestCase):
    def test_health_answer_names_the_instance_when_given(self):
        for instance_id, want in (("py-1", {"status": "ok", "instance_id": "py-1"}), (None, {"status": "ok"})):
            server = ProviderServer(port=0, instance_id=instance_id).start()
            try:
                with urllib.request.urlopen(server.url + "/healthz", timeout=5) as resp:
                    self.assertEqual(json.loads(resp.read()), want)
            finally:
                server.stop()


class RejoinTest(unittest.TestCase):
    def test_rejoining_retries_within_a_heartbeat_interval(self):
        agent = Agent(registries=["http://127.0.0.1:1"], instance_id="py-1", service_name="s", service_version="1.0.0",
                      endpoint="http://127.0.0.1:2", capabilities=[], heartbeat_interval=10.0)
        for _ in range(50):
            wait = agent._capped(300.0, True)
            self.assertTrue(5.0 <= wait <= 10.0, wait)
        self.assertEqual(agent._capped(300.0, False), 300.0)  # a first registration keeps the backoff's cap
        self.assertEqual(agent._capped(2.0, True), 2.0)


class ShedWatchTest(unittest.TestCase):
    """A watch the registry shed over its reconnection cap (429 with a Retry-After) waits the
    Retry-After and up to as much again at random; any other failure the short backoff."""

    def test_a_shed_watch_waits_the_retry_after(self):
        from meshflows.errors import APIError
        c = DiscoveryClient(["http://127.0.0.1:9"])
        _, v = c._view_of("x.y", None, None, None)
        waits = []

        class Stop:
            def wait(self, d):
                waits.append(d)

        c._watch_failed(v, APIError(429, "RATE_LIMITED", "shed", None, 3.0), 0, Stop())
        c._watch_failed(v, APIError(503, "UNAVAILABLE", "down"), 0, Stop())
        self.assertTrue(3.0 <= waits[0] < 6.0, waits)
        self.assertTrue(0.0 <= waits[1] < 0.1, waits)
