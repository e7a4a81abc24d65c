"""The Python agent against the real registry: the Go agent's lifecycle rules."""

import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import BIN, DEAD, Registry, eventually, get_json, require_binary
from meshflows import Agent, Capability, DiscoveryClient, ProviderServer, RegistryUnavailable
from meshflows._client import ssl_context


def webhook_agent(registries, instance_id="py-webhook-1", endpoint="http://127.0.0.1:9100", **kw):
    return Agent(registries=registries, instance_id=instance_id, service_name="egress-webhook", service_version="0.1.0",
                 endpoint=endpoint, capabilities=[Capability("webhook.send", "1.0.0", provider="webhook",
                                                             metadata={"validate_supported": True})], **kw)


class AgentTest(unittest.TestCase):
    def setUp(self):
        require_binary(self)
        self.registry = Registry()
        self.addCleanup(self.registry.stop)

    def test_register_heartbeat_deregister(self):
        server = ProviderServer(port=0, invoke={"webhook.send": lambda req: {"sent": True}}).start()
        self.addCleanup(server.stop)
        agent = webhook_agent([self.registry.url], endpoint=server.url, drain_timeout=2)
        agent.start()
        self.assertTrue(agent.wait_registered(10))
        self.assertEqual(agent.state, "registered")
        inst = self.registry.instance("py-webhook-1")
        self.assertEqual(inst["generation"], agent.generation)
        self.assertEqual(agent.registry_epoch, self.registry.epoch())
        first = inst["lease_expires_at"]
        eventually("a heartbeat moves the lease", lambda: self.registry.instance("py-webhook-1")["lease_expires_at"] != first)
        agent.stop(timeout=10)
        self.assertEqual(agent.state, "stopped")
        self.assertIsNone(self.registry.instance("py-webhook-1"), "still registered after stop")

    def test_registry_restart_reregisters(self):
        with webhook_agent([self.registry.url]) as agent:
            self.assertTrue(agent.wait_registered(10))
            old_epoch = agent.registry_epoch
            port = self.registry.port
            self.registry.stop()
            self.registry = Registry(port=port)
            self.addCleanup(self.registry.stop)
            eventually("registered with the restarted registry", lambda: self.registry.instance("py-webhook-1") is not None)
            eventually("the agent knows the new epoch", lambda: agent.registry_epoch == self.registry.epoch())
            self.assertNotEqual(agent.registry_epoch, old_epoch)
            self.assertGreaterEqual(agent.registrations, 2)

    def test_generation_mismatch_registers_again(self):
        with webhook_agent([self.registry.url]) as agent:
            self.assertTrue(agent.wait_registered(10))
            body = {"instance_id": "py-webhook-1", "service_name": "egress-webhook", "service_version": "0.1.0",
                    "endpoint": "http://127.0.0.1:9100", "capabilities": [Capability("webhook.send", "1.0.0", provider="webhook").to_json()]}
            req = urllib.request.Request(self.registry.url + "/v1/services/register", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
            forced = json.loads(urllib.request.urlopen(req, timeout=5).read())["generation"]
            # the agent's next heartbeat gets 410 and it registers again, above the intruder
            eventually("re-registered after 410", lambda: agent.generation > forced)
            self.assertEqual(self.registry.instance("py-webhook-1")["generation"], agent.generation)

    def test_degraded_lowers_the_weight(self):
        client = DiscoveryClient([self.registry.url], ttl=0)
        with webhook_agent([self.registry.url]) as agent:
            self.assertTrue(agent.wait_registered(10))
            eventually("serving at 100", lambda: client.capabilities("webhook.send")[0].get("weight") == 100)
            with self.assertRaises(ValueError):
                agent.set_health("sideways")
            agent.set_health("degraded")
            eventually("degraded at weight 50", lambda: (lambda e: e["eligibility"] == "degraded" and e["weight"] == 50)(
                client.capabilities("webhook.send")[0]))
            agent.set_health("ok")
            eventually("back to serving", lambda: client.capabilities("webhook.send")[0]["eligibility"] in ("serving", "slow_start"))

    def test_publish_when_ready(self):
        # registered not_ready, the first member of a brand-new service is answered nowhere
        # (not even in panic) until ready(), which heartbeats ok at once (the interval is long)
        client = DiscoveryClient([self.registry.url], ttl=0)
        agent = webhook_agent([self.registry.url], publish_when_ready=True, heartbeat_interval=60)
        with agent:
            self.assertTrue(agent.wait_registered(10))
            self.assertEqual(self.registry.instance("py-webhook-1")["health"], "not_ready")
            self.assertEqual(agent.health, "not_ready")
            self.assertFalse(agent.is_ready)
            self.assertEqual(client.capabilities("webhook.send"), [])
            agent.ready()
            eventually("in rotation once ready", lambda: [e["instance_id"] for e in client.capabilities("webhook.send")] == ["py-webhook-1"])
            self.assertEqual(self.registry.instance("py-webhook-1")["health"], "ok")
            self.assertTrue(agent.is_ready)

    def test_update_capabilities_registers_again(self):
        with webhook_agent([self.registry.url]) as agent:
            self.assertTrue(agent.wait_registered(10))
            gen = agent.generation
            agent.update_capabilities([Capability("webhook.send", "1.1.0", provider="webhook")])
            eventually("registered with 1.1.0", lambda: self.registry.instance("py-webhook-1")["capabilities"][0]["capability_version"] == "1.1.0")
            # The registry holds the new incarnation before the agent has read its answer.
            eventually("the agent holds the new generation", lambda: agent.generation > gen)
            self.assertEqual(self.registry.instance("py-webhook-1")["generation"], agent.generation)

    def test_failover_to_the_next_registry(self):
        with webhook_agent([DEAD, self.registry.url]) as agent:
            self.assertTrue(agent.wait_registered(10))
            self.assertEqual(agent.registry, self.registry.url)


class DiscoveryTest(unittest.TestCase):
    def setUp(self):
        require_binary(self)

    def test_last_known_good_through_a_stopped_registry(self):
        registry = Registry()
        self.addCleanup(registry.stop)
        client = DiscoveryClient([registry.url], ttl=0.05, max_stale=1.0)
        with self.assertRaises(RegistryUnavailable):  # before anything: never an empty list
            DiscoveryClient([DEAD]).capabilities("webhook.send")
        with webhook_agent([registry.url], drain_timeout=0.2) as agent:
            self.assertTrue(agent.wait_registered(10))
            eventually("discovered", lambda: len(client.capabilities("webhook.send")) == 1)
            self.assertEqual(client.state, "fresh")
            registry.stop()
            time.sleep(0.1)
            entries = client.capabilities("webhook.send")
            self.assertEqual([e["instance_id"] for e in entries], ["py-webhook-1"])
            self.assertEqual(client.state, "stale")
            time.sleep(1.1)
            with self.assertRaises(RegistryUnavailable) as cm:
                client.capabilities("webhook.send")
            self.assertEqual(cm.exception.state, "expired")

    def test_stale_policy_per_query(self):
        # by default the last-known-good view is served for as long as the registry is away;
        # a query that declares max_stale stops at its bound, the others go on
        registry = Registry()
        self.addCleanup(registry.stop)
        client = DiscoveryClient([registry.url], ttl=0.05)
        with webhook_agent([registry.url], drain_timeout=0.2) as agent:
            self.assertTrue(agent.wait_registered(10))
            eventually("discovered", lambda: len(client.capabilities("webhook.send")) == 1)
            registry.stop()
            time.sleep(0.6)
            with self.assertRaises(RegistryUnavailable) as cm:
                client.capabilities("webhook.send", max_stale=0.3)
            self.assertEqual(cm.exception.state, "expired")
            entries = client.capabilities("webhook.send")
            self.assertEqual([e["instance_id"] for e in entries], ["py-webhook-1"])
            self.assertEqual(client.state, "stale")

    def test_authoritative_empty(self):
        registry = Registry()
        self.addCleanup(registry.stop)
        # past the warm-up of a fresh registry, an empty answer is authoritative
        client = DiscoveryClient([registry.url], ttl=0)
        eventually("complete answers", lambda: get_json(registry.url + "/v1/discovery/capabilities?capability_id=none.none")["complete"], timeout=10)
        self.assertEqual(client.capabilities("none.none"), [])
        self.assertEqual(client.state, "authoritative_empty")


class TLSTest(unittest.TestCase):
    def test_client_certificate(self):
        require_binary(self)
        d = tempfile.mkdtemp()
        for args in (["certs", "init", "--dir", d], ["certs", "issue", "--dir", d, "--identity", "egress-webhook"],
                     ["certs", "issue", "--dir", d, "--identity", "ops"]):
            subprocess.run([BIN, *args], check=True, capture_output=True)
        rbac = os.path.join(d, "rbac.yaml")
        with open(rbac, "w") as f:
            f.write("identities: {egress-webhook: [provider], ops: [admin]}\nroles:\n"
                    "  provider: {capabilities: [\"webhook.*\"]}\n  admin: {admin: true}\n")
        ops = ssl_context(os.path.join(d, "ca.pem"), os.path.join(d, "ops.pem"), os.path.join(d, "ops-key.pem"))
        registry = Registry("--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server-key.pem"),
                            "--client-ca", os.path.join(d, "ca.pem"), "--rbac", rbac, insecure=False, scheme="https", context=ops)
        self.addCleanup(registry.stop)
        agent = webhook_agent([registry.url], ca_file=os.path.join(d, "ca.pem"), cert_file=os.path.join(d, "egress-webhook.pem"),
                              key_file=os.path.join(d, "egress-webhook-key.pem"))
        with agent:
            self.assertTrue(agent.wait_registered(10))
            self.assertEqual(registry.instance("py-webhook-1")["service_name"], "egress-webhook")
        # without a client certificate the registry says who is missing: 401, and the agent backs off
        anon = webhook_agent([registry.url], ca_file=os.path.join(d, "ca.pem"), instance_id="py-anon")
        with anon:
            eventually("backing off", lambda: anon.state == "backing_off")
            self.assertFalse(anon.wait_registered(0.1))


class _Hostile(BaseHTTPRequestHandler):
    """Answers every request as the server's mode says."""
    protocol_version = "HTTP/1.1"
    mode = "garbage"

    def log_message(self, *a):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if self.mode == "429":
            body = b'{"error":{"code":"RATE_LIMITED","message":"slow down"}}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
        elif self.mode == "truncated":
            body = b'{"accepted": true, "generation": '
            self.send_response(200)
        else:
            body = b"<html>not json</html>"
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_GET = do_DELETE = _answer


class BadInputTest(unittest.TestCase):
    """The agent keeps its state machine against hostile registries: it backs off, never
    spins, never raises out of its thread."""

    def _hostile(self, mode):
        handler = type("H", (_Hostile,), {"mode": mode})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return f"http://127.0.0.1:{srv.server_address[1]}", srv

    def test_hostile_answers(self):
        for mode in ("garbage", "truncated", "429"):
            with self.subTest(mode=mode):
                url, srv = self._hostile(mode)
                requests = []
                orig = srv.RequestHandlerClass._answer

                def counting(h, orig=orig):
                    requests.append(1)
                    orig(h)
                srv.RequestHandlerClass.do_POST = counting
                agent = webhook_agent([url], instance_id="py-" + mode, request_timeout=1)
                agent.start()
                eventually("backing off", lambda: agent.state == "backing_off", timeout=5)
                time.sleep(1.0)
                self.assertTrue(agent._thread.is_alive(), "the agent's thread died")
                self.assertLess(len(requests), 12, f"{len(requests)} attempts in about a second: spinning")
                agent.stop(timeout=5)
                self.assertEqual(agent.state, "stopped")

    def test_a_registry_that_never_answers(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # accepts connections (in the backlog) and never answers
        self.addCleanup(sock.close)
        agent = webhook_agent([f"http://127.0.0.1:{sock.getsockname()[1]}"], instance_id="py-silent", request_timeout=0.3)
        agent.start()
        eventually("backing off after a timeout", lambda: agent.state == "backing_off", timeout=5)
        agent.stop(timeout=5)
        self.assertFalse(agent._thread.is_alive())


if __name__ == "__main__":
    unittest.main()


class RetryAfterTest(unittest.TestCase):
    """A shed registration waits the registry's Retry-After and up to as much again at random:
    a herd shed together comes back spread over the time the registry asked for."""

    def test_jittered_retry_after(self):
        from meshflows.agent import jittered_retry_after
        for rand, want in ((0.0, 7.0), (0.5, 10.5), (0.999, 13.993)):
            self.assertAlmostEqual(jittered_retry_after(7, lambda: rand), want)
        self.assertEqual(jittered_retry_after(None), 0.0)
        self.assertEqual(jittered_retry_after(0), 0.0)
