// Package gateway is the MeshFlows API gateway: it watches the registry's routes view
// through the discovery client, derives a routing.Table on every change (and when its path
// policy changes), swaps it atomically — requests in flight finish on the table they
// started with — and proxies requests by it: round robin across the winning group's
// instances, one retry on another instance after a connection failure for idempotent routes
// only, and the last valid table while the registry cannot be reached, every response
// saying so (X-Cache-Source, X-Route-Table-Age).
package gateway
