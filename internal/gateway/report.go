package gateway

import (
	"fmt"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// noUpstreamAfter is how long a route must have had no eligible upstream before the gateway
// reports it as a route incident.
const noUpstreamAfter = time.Minute

// reported is what the gateway last told the registry about its table (see reportTable).
type reported struct {
	conflicts map[string]bool      // "METHOD pattern won by X over Y"
	rejected  map[string]bool      // "instance code"
	empty     map[string]time.Time // routes without an eligible upstream, since
	raised    map[string]bool      // routes reported as an incident
}

// reportTable queues, for the registry, what changed in the table since the last call: new
// conflicts and rejected manifests (journal events), and routes without an eligible upstream
// for noUpstreamAfter (a route incident, cleared when the route serves again or leaves the
// table). Called from Run only.
func (g *Gateway) reportTable(now time.Time) {
	r, st := g.cfg.Reporter, g.state.Load()
	if r == nil || st == nil || st.staticOnly {
		return
	}
	rep := &g.reported
	if rep.conflicts == nil {
		*rep = reported{conflicts: map[string]bool{}, rejected: map[string]bool{}, empty: map[string]time.Time{}, raised: map[string]bool{}}
	}
	conflicts := map[string]bool{}
	for _, c := range st.table.Conflicts() {
		key := fmt.Sprintf("%s %s won by %s over %s", c.Method, c.Pattern, c.Winner, strings.Join(c.Losers, ", "))
		conflicts[key] = true
		if !rep.conflicts[key] {
			r.Event(apiv1.ReportedEvent{Type: apiv1.EventRouteConflict, Severity: apiv1.SeverityWarning, Subject: c.Method + " " + c.Pattern,
				Message: "route conflict: " + key, Attrs: map[string]any{"gateway": g.cfg.ID, "winner": c.Winner, "losers": c.Losers}})
		}
	}
	rejected := map[string]bool{}
	for _, rj := range st.table.Rejected() {
		key := rj.Instance + " " + rj.Code
		rejected[key] = true
		if !rep.rejected[key] {
			msg := fmt.Sprintf("manifest of %s (%s) rejected: %s", rj.Instance, rj.Service, rj.Code)
			if rj.Reason != "" {
				msg += ": " + rj.Reason
			}
			r.Event(apiv1.ReportedEvent{Type: apiv1.EventRouteRejected, Severity: apiv1.SeverityWarning, Subject: rj.Instance,
				Message: msg, Attrs: map[string]any{"gateway": g.cfg.ID, "service": rj.Service, "code": rj.Code}})
		}
	}
	rep.conflicts, rep.rejected = conflicts, rejected
	empty := map[string]time.Time{}
	for e, sv := range st.serving {
		if len(sv.upstreams) > 0 || e.Source != "dynamic" {
			continue
		}
		name := routeName(e)
		since, ok := rep.empty[name]
		if !ok {
			since = now
		}
		empty[name] = since
		if now.Sub(since) >= noUpstreamAfter && !rep.raised[name] {
			rep.raised[name] = true
			summary := fmt.Sprintf("route %s has had no eligible upstream for %s at gateway %s: its requests get 503", name, now.Sub(since).Round(time.Second), g.cfg.ID)
			r.Event(apiv1.ReportedEvent{Type: apiv1.EventRouteNoUpstream, Severity: apiv1.SeverityError, Subject: name, Message: summary,
				Attrs: map[string]any{"gateway": g.cfg.ID, "since": since.UTC()}})
			r.Condition(apiv1.Condition{Kind: apiv1.IncidentRoute, Subject: name, Active: true, Summary: summary})
		}
	}
	for name := range rep.raised {
		if _, still := empty[name]; !still {
			delete(rep.raised, name)
			r.Condition(apiv1.Condition{Kind: apiv1.IncidentRoute, Subject: name, Active: false})
		}
	}
	rep.empty = empty
}
