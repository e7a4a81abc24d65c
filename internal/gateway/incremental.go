package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/routing"
)

// DefaultRoutesVerifyEvery is how many row changes the gateway applies incrementally between
// two full derivations that check them.
const DefaultRoutesVerifyEvery = 1000

// tables is the gateway's incremental derivation: the follower of its routes views, and
// the row changes applied since the last full derivation that checked them.
type tables struct {
	routing.Follower
	sinceVerify int
}

// tableFor returns the table of the view r under policy, and whether it is a new one: the
// first view, and one of a new registry epoch (not a continuation of the last), are derived
// whole; a later one applies what differs from the last to the incremental deriver. Every
// RoutesVerifyEvery row changes, a full derivation checks the incremental table: when they
// differ, the full table wins (and the deriver starts again from it), an ERROR log names the
// first differing row and meshflows_gateway_routes_divergence_total counts it.
func (g *Gateway) tableFor(r *discovery.RoutesResult, policy routing.Policy) (*routing.Table, bool, []routing.RowChange) {
	in := g.input(r, policy)
	if g.tables == nil {
		g.tables = &tables{}
	}
	ts := g.tables
	t, whole, rows := ts.Next(in, r.RegistryEpoch)
	if whole || len(rows) > 0 {
		g.metrics.derivations.Inc()
	}
	if whole || len(rows) == 0 {
		return t, whole, nil
	}
	ts.sinceVerify += len(rows)
	if every := g.cfg.RoutesVerifyEvery; every > 0 && ts.sinceVerify >= every {
		ts.sinceVerify = 0
		if full := routing.Derive(in); !g.sameTables(t, full) {
			ts.Reset(in, r.RegistryEpoch)
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
