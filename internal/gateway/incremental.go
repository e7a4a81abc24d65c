package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/routing"
)

// DefaultRoutesVerifyEvery is how many row changes the gateway applies incrementally between
// two full derivations that check them.
const DefaultRoutesVerifyEvery = 1000

// tables is the gateway's incremental derivation: the deriver and the input it holds, which
// each routes view is compared with to find the changes to apply.
type tables struct {
	d         *routing.Deriver
	epoch     string
	manifests map[string]routing.ManifestInput
	aliases   map[aliasKey]routing.Alias
	policy    routing.Policy
	// sinceVerify counts the row changes applied since the last full derivation.
	sinceVerify int
}

type aliasKey struct{ path, capability, instance string }

// tableFor returns the table of the view r under policy, and whether it is a new one: the
// first view, and one of a new registry epoch (not a continuation of the last), are derived
// whole; a later one applies what differs from the last to the incremental deriver. Every
// RoutesVerifyEvery row changes, a full derivation checks the incremental table: when they
// differ, the full table wins (and the deriver starts again from it), an ERROR log names the
// first differing row and meshflows_gateway_routes_divergence_total counts it.
func (g *Gateway) tableFor(r *discovery.RoutesResult, policy routing.Policy) (*routing.Table, bool, []routing.RowChange) {
	in := g.input(r, policy)
	ts := g.tables
	if ts == nil || ts.epoch != r.RegistryEpoch {
		ts = &tables{d: routing.NewDeriver(in), epoch: r.RegistryEpoch}
		ts.remember(in)
		g.tables = ts
		g.metrics.derivations.Inc()
		return ts.d.Table(), true, nil
	}
	changes := ts.diff(in)
	if len(changes) == 0 {
		return ts.d.Table(), false, nil
	}
	t, rows := ts.d.Apply(changes...)
	ts.remember(in)
	g.metrics.derivations.Inc()
	ts.sinceVerify += len(rows)
	if every := g.cfg.RoutesVerifyEvery; every > 0 && ts.sinceVerify >= every {
		ts.sinceVerify = 0
		if full := routing.Derive(in); !g.sameTables(t, full) {
			g.tables = &tables{d: routing.NewDeriver(in), epoch: r.RegistryEpoch}
			g.tables.remember(in)
			return full, true, nil
		}
	}
	return t, true, rows
}

// sameTables compares the incremental table with the full one; a difference is logged with
// its first row and counted.
func (g *Gateway) sameTables(inc, full *routing.Table) bool {
	a, _ := json.Marshal(inc.Canonical())
	b, _ := json.Marshal(full.Canonical())
	if bytes.Equal(a, b) {
		return true
	}
	g.metrics.divergence.Inc()
	ci, cf := inc.Canonical(), full.Canonical()
	first := "the rejections or conflicts"
	for i := range max(len(ci.Routes), len(cf.Routes)) {
		var ri, rf string
		if i < len(ci.Routes) {
			b, _ := json.Marshal(ci.Routes[i])
			ri = string(b)
		}
		if i < len(cf.Routes) {
			b, _ := json.Marshal(cf.Routes[i])
			rf = string(b)
		}
		if ri != rf {
			first = fmt.Sprintf("row %d: incremental %s, full %s", i, orNone(ri), orNone(rf))
			break
		}
	}
	g.cfg.Logger.Error("the incremental routing table differs from a full derivation; the full table serves and the incremental derivation starts again from it",
		slog.String("first_difference", first), slog.Int("incremental_routes", len(ci.Routes)), slog.Int("full_routes", len(cf.Routes)))
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// remember keeps in as the input the deriver holds.
func (ts *tables) remember(in routing.Input) {
	ts.manifests = make(map[string]routing.ManifestInput, len(in.Manifests))
	for _, mi := range in.Manifests {
		ts.manifests[routing.ManifestID(mi)] = mi
	}
	ts.aliases = make(map[aliasKey]routing.Alias, len(in.Aliases))
	for _, a := range in.Aliases {
		ts.aliases[aliasKey{a.Path, a.CapabilityID, a.Instance}] = a
	}
	ts.policy = in.Policy
}

// diff returns the changes that take the deriver's input to in: manifests and public paths
// by incarnation (a manifest never changes within one), and the policy by service.
func (ts *tables) diff(in routing.Input) []routing.Change {
	var out []routing.Change
	for s, p := range in.Policy {
		if old, ok := ts.policy[s]; !ok || !slices.Equal(old, p) {
			out = append(out, routing.Change{Policy: &routing.PolicyChange{Service: s, Prefixes: p}})
		}
	}
	for s := range ts.policy {
		if _, ok := in.Policy[s]; !ok {
			out = append(out, routing.Change{Policy: &routing.PolicyChange{Service: s}})
		}
	}
	seen := make(map[string]bool, len(in.Manifests))
	for i := range in.Manifests {
		mi := &in.Manifests[i]
		id := routing.ManifestID(*mi)
		seen[id] = true
		if old, ok := ts.manifests[id]; !ok || old.Generation != mi.Generation || old.Endpoint != mi.Endpoint {
			out = append(out, routing.Change{PutManifest: mi})
		}
	}
	for id := range ts.manifests {
		if !seen[id] {
			out = append(out, routing.Change{DeleteManifest: id})
		}
	}
	seenAlias := make(map[aliasKey]bool, len(in.Aliases))
	for i := range in.Aliases {
		a := &in.Aliases[i]
		k := aliasKey{a.Path, a.CapabilityID, a.Instance}
		seenAlias[k] = true
		if old, ok := ts.aliases[k]; !ok || old != *a {
			out = append(out, routing.Change{PutAlias: a})
		}
	}
	for k, a := range ts.aliases {
		if !seenAlias[k] {
			out = append(out, routing.Change{DeleteAlias: &a})
		}
	}
	return out
}

// rowNames names at most n of rows, "METHOD pattern (added|removed|changed)".
func rowNames(rows []routing.RowChange, n int) []string {
	out := make([]string, 0, min(n, len(rows)))
	for _, r := range rows[:min(n, len(rows))] {
		what, e := "changed", r.New
		switch {
		case r.Old == nil:
			what = "added"
		case r.New == nil:
			what, e = "removed", r.Old
		}
		out = append(out, r.Method+" "+e.Pattern+" ("+what+")")
	}
	return out
}
