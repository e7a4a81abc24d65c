"""MeshFlows provider SDK and discovery client, standard library only.

- :class:`Agent` keeps a provider instance registered: it registers with backoff, heartbeats
  (reporting the health :meth:`Agent.set_health` sets), registers again after a registry
  restart, fails over between registries, and deregisters with its generation on stop,
  waiting for the gateways to withdraw it.
- :class:`ProviderServer` serves a provider's capability endpoints (validate, invoke) and its
  health endpoint.
- :mod:`meshflows.tracecontext` carries a caller's W3C trace through a provider's handlers.
- :class:`DiscoveryClient` answers capability queries from a cache with a last-known-good
  view that survives a registry outage.
- :class:`RegionalDiscoveryClient` answers them region by region: one DiscoveryClient per
  region, never merged; home while it is on and ready, else the next region that is.
"""

from .agent import Agent, Capability
from .discovery import DiscoveryClient, RegionalDiscoveryClient, RegistryUnavailable
from .errors import APIError
from .server import ProviderServer
from . import tracecontext

__all__ = ["Agent", "APIError", "Capability", "DiscoveryClient", "ProviderServer", "RegionalDiscoveryClient", "RegistryUnavailable", "tracecontext"]
