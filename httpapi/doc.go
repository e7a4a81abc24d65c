// Package httpapi is the HTTP adapter every MeshFlows server shares — the registry, the
// gateway's admin endpoints, the orchestrator, the dashboard, the provider SDK and the
// example providers: JSON answers (WriteJSON), the error body of the wire contract
// (WriteError), the answer to a request no route takes (NotRouted, RouteError: 405 with
// Allow, else 404) and graceful serving (Serve). It is public, and imports neither
// internal/ nor etcd, so providers built on the SDK answer exactly as the servers do.
package httpapi
