// Package routing derives a gateway's routing table as a pure function of its inputs —
// static routes, the manifests services publish and the path policy — and matches requests
// against it (docs/reference/routing.md is the contract):
//
//	t := routing.Derive(routing.Input{Static: static, Manifests: manifests, Policy: policy})
//	out := t.Canonical()               // routes, rejected manifests, conflicts: byte-identical for identical inputs
//	m := t.Match("GET", "/v2/assets/42") // the winning route, or 404, or 405 with Allow
//
// A manifest that breaks any rule is rejected whole. For each (path key, method) a static
// route beats every dynamic group; among groups the higher service version wins, then the
// higher weight, then the senior group (lowest generation still present). Matching is
// compiled into a segment trie once per table, so its cost does not grow with the number of
// routes. The package is public: it imports api/v1 and Masterminds/semver, nothing internal.
//
// Derivation (routing.go) analyses the manifests on every core, groups the claims by path
// key (slots.go), builds the entries and the trie (match.go) a share of the keys per core,
// and keeps the memory it needs only while it runs in a pool for the next derivation
// (scratch.go): a gateway derives again at every change of the manifests.
package routing
