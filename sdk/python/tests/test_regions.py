"""The regional discovery client against three real registries, one per region."""

import threading
import unittest

from harness import Registry, eventually, require_binary
from meshflows import Agent, Capability, DiscoveryClient, RegionalDiscoveryClient


def agent(registry, instance_id):
    return Agent(registries=[registry.url], instance_id=instance_id, service_name="egress-webhook", service_version="0.1.0",
                 endpoint="http://127.0.0.1:9100", capabilities=[Capability("webhook.send", "1.0.0", provider="webhook")])


class RegionsTest(unittest.TestCase):
    def setUp(self):
        require_binary(self)
        self.registries = {}
        for r in ("a", "b", "c"):
            self.registries[r] = Registry("--region", r, "--no-eligibility")
            self.addCleanup(self.registries[r].stop)

    def test_home_then_the_next_region_on(self):
        off = set()
        client = RegionalDiscoveryClient("a", {r: DiscoveryClient([reg.url], ttl=0) for r, reg in self.registries.items()},
                                         priority=["c", "b"], on=lambda r: r not in off)
        with agent(self.registries["b"], "b-1") as b1, agent(self.registries["c"], "c-1") as c1:
            self.assertTrue(b1.wait_registered(10) and c1.wait_registered(10))
            eventually("home empty: c answers", lambda: client.capabilities("webhook.send")[0] == "c")
            with agent(self.registries["a"], "a-1") as a1:
                self.assertTrue(a1.wait_registered(10))
                eventually("home answers", lambda: client.capabilities("webhook.send")[0] == "a")
                region, entries = client.capabilities("webhook.send")
                self.assertEqual([e["instance_id"] for e in entries], ["a-1"], "a region's answer holds another's instances")
                off.add("a")
                self.assertEqual(client.capabilities("webhook.send")[0], "c")
                off.add("c")
                self.assertEqual(client.capabilities("webhook.send")[0], "b")

    def test_a_home_without_client_is_refused(self):
        with self.assertRaises(ValueError):
            RegionalDiscoveryClient("x", {"a": DiscoveryClient([self.registries["a"].url])})


if __name__ == "__main__":
    unittest.main()
