// Package nameserver owns the DNS interface of MeshFlows: it answers the registry's
// discovery view to any resolver — capabilities (SRV, A/AAAA, TXT), services and instances —
// with only the instances in rotation (all of them when their group is in panic), weights in
// SRV, and answers that keep flowing from the last-known-good view while the registry is
// away. It is a consumer built on the public discovery client.
package nameserver
