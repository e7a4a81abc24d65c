// Package gateway is the MeshFlows API gateway: it watches the registry's routes view
// through the discovery client, derives a routing.Table on every change (and when its path
// policy changes), swaps it atomically — requests in flight finish on the table they
// started with — and proxies requests by it: round robin across the winning group's
// instances, one retry on another instance after a failure to connect (nothing was sent, so
// any method goes again, when its body can be sent again; no other failure is retried, and a
// route's idempotent list does not change that), and the last valid table while the registry cannot be reached, every response
// saying so (X-Cache-Source, X-Route-Table-Age).
//
// Requests go upstream through httputil.ReverseProxy over the package's Transport
// (transport.go): a bodiless GET, HEAD or OPTIONS to a plain-HTTP upstream is written and
// answered on the request's goroutine over a pooled connection, everything else through
// http.Transport.
package gateway
