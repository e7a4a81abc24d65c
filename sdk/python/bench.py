#!/usr/bin/env python3
"""Measures the Python agent: the CPU of one agent's steady state at a 1 s heartbeat, and how
long N agents in one process take to be back after a registry restart.

    go build -o /tmp/meshflows ./cmd/meshflows
    python3 sdk/python/bench.py --bin /tmp/meshflows --agents 200
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))

import harness  # noqa: E402
from meshflows import Agent, Capability  # noqa: E402


def agent(url, i):
    return Agent(registries=[url], instance_id=f"bench-{i}", service_name="bench", service_version="1.0.0",
                 endpoint=f"http://127.0.0.1:{20000 + i}", capabilities=[Capability("bench.read", "1.0.0", provider="http")],
                 drain_timeout=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the meshflows binary")
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--steady", type=float, default=10.0, help="seconds of one agent's steady state to measure")
    args = ap.parse_args()
    harness.BIN = args.bin

    reg = harness.Registry()
    try:
        # One agent, heartbeating every second: CPU used by this process over --steady seconds.
        one = agent(reg.url, 0)
        one.start()
        one.wait_registered(10)
        c0, t0 = time.process_time(), time.monotonic()
        time.sleep(args.steady)
        cpu = (time.process_time() - c0) / (time.monotonic() - t0)
        one.stop()
        print(f"one agent, 1 s heartbeat: {cpu * 100:.3f} % of a core over {args.steady:.0f} s")

        agents = [agent(reg.url, i + 1) for i in range(args.agents)]
        start = time.monotonic()
        for a in agents:
            a.start()
        for a in agents:
            a.wait_registered(60)
        print(f"{args.agents} agents registered in {time.monotonic() - start:.2f} s")
        before = {a: a.registrations for a in agents}
        port = reg.port
        reg.stop()
        reg = harness.Registry(port=port)
        start = time.monotonic()
        deadline = start + 60
        while time.monotonic() < deadline and not all(a.registrations > before[a] for a in agents):
            time.sleep(0.01)
        back = sum(1 for a in agents if a.registrations > before[a])
        print(f"registry restart: {back}/{args.agents} agents back in {time.monotonic() - start:.2f} s "
              f"(heartbeat interval 1 s: the target is 2 intervals)")
        for a in agents:
            a._stop_timeout = 0.5
            a.stop(timeout=2)
    finally:
        reg.stop()


if __name__ == "__main__":
    main()
