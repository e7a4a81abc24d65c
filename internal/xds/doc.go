// Package xds owns the xDS interface of MeshFlows: it serves the registry's discovery view
// over ADS (Envoy's aggregated discovery service) to Envoy and to gRPC clients with
// xds:/// targets — a cluster and its endpoints per capability and per (capability,
// provider), endpoint weights and health from eligibility, localities from zones, priorities
// from metadata.priority, and an API listener per cluster for proxyless gRPC. It is a
// consumer built on the public discovery client and keeps serving its last snapshot while
// the registry is away.
package xds
