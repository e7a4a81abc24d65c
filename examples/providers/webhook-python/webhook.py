#!/usr/bin/env python3
"""An example provider of webhook.send on the MeshFlows Python SDK.

It serves the capability's validate and invoke endpoints, a manifest route
POST /api/webhook/send (what the gateway exposes) and GET /api/webhook/sent, and keeps
itself registered until Ctrl-C. The "webhook" is kept in memory: this is an example.

    python3 examples/providers/webhook-python/webhook.py --registry http://127.0.0.1:7400 --listen 127.0.0.1:9100
"""

import argparse
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "python"))

from meshflows import Agent, Capability, ProviderServer  # noqa: E402

sent = []
lock = threading.Lock()


def validate(req):
    """webhook.send needs request.url (an http or https URL)."""
    request = (req.get("step") or {}).get("request") or {}
    url = request.get("url", "")
    if not url:
        return [{"severity": "error", "code": "URL_REQUIRED", "message": "webhook.send needs request.url", "path": "request.url"}]
    if not str(url).startswith(("http://", "https://")) and "${" not in str(url):
        return [{"severity": "error", "code": "URL_INVALID", "message": f"{url!r} is not an http(s) URL", "path": "request.url"}]
    return []


def deliver(url, payload):
    with lock:
        sent.append({"url": url, "payload": payload})
        return {"delivered": True, "id": len(sent)}


def invoke(req):
    """Runs a workflow step: the request's url, the step's payload."""
    request = req.get("request") or {}
    if not request.get("url"):
        raise ValueError("request.url is required")
    return deliver(request["url"], req.get("payload"))


def send(body):
    """POST /api/webhook/send {"url", "payload"}: what the gateway routes here."""
    if not body.get("url"):
        raise ValueError("url is required")
    return deliver(body["url"], body.get("payload"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", action="append", default=[], help="registry base URL (repeat for failover)")
    ap.add_argument("--listen", default="127.0.0.1:9100", help="address to serve on")
    ap.add_argument("--instance-id", default="", help="instance id (default: egress-webhook-PORT)")
    ap.add_argument("--token", default=os.environ.get("MESHFLOWS_TOKEN"), help="bearer token for the registry")
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    server = ProviderServer(host=host, port=int(port), validate={"webhook.send": validate}, invoke={"webhook.send": invoke},
                            routes={("POST", "/api/webhook/send"): send,
                                    ("GET", "/api/webhook/sent"): lambda _: {"sent": list(sent)}})
    server.start()
    instance = args.instance_id or f"egress-webhook-{server.port}"
    agent = Agent(
        registries=args.registry or ["http://127.0.0.1:7400"], instance_id=instance,
        service_name="egress-webhook", service_version="0.1.0", endpoint=server.url, token=args.token,
        capabilities=[Capability("webhook.send", "1.0.0", provider="webhook", metadata={"validate_supported": True})],
        manifest={"farp": "1.0", "service": {"name": "egress-webhook", "instance": instance, "version": "0.1.0"},
                  "health": {"path": "/healthz", "interval": "5s", "unhealthy_after": 3},
                  "routes": [{"path": "/api/webhook/send", "methods": ["POST"]},
                             {"path": "/api/webhook/sent", "methods": ["GET"], "idempotent": ["GET"]}]})
    agent.start()
    print(f"webhook provider {instance} serving on {server.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    registered = False
    while not done.wait(0.2):
        if not registered and agent.wait_registered(0):
            registered = True
            print(f"registered with {agent.registry}, generation {agent.generation}", flush=True)
    agent.stop(timeout=15)  # deregisters and waits for the gateways to withdraw it
    server.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
