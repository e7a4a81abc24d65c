package gateway

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/outcome"
	"github.com/meshflows/meshflows/routing"
)

// upstream is one instance a route sends requests to, at its eligibility weight.
type upstream struct {
	url    *url.URL
	weight int
	tally  *tally
	// instance and eligibility name it in a trace
	instance, eligibility string
}

// incarnation names one registration of an instance.
type incarnation struct {
	instance   string
	generation int64
}

// tally counts what the gateway saw of one incarnation in the current outcome window.
type tally = outcome.Tally

// serving is what the proxy needs per route: the upstreams in rotation (all of them under
// panic) with their weights, and the balancer's state. Equal weights balance by a plain
// round-robin counter; unequal ones (slow start, degraded) by smooth weighted round robin.
type serving struct {
	upstreams []upstream
	health    *routeStat // the route's counts (nil for a table not built by derive)
	uniform   bool
	next      atomic.Uint64
	// maxStale is the route's bound on serving from a last-known-good view: the strictest of
	// its manifest's max_stale and the policy's for its prefixes (0: none of its own)
	maxStale time.Duration
	// panic: the route's pool is under the panic threshold (or the registry says a group of
	// it is in panic), so its upstreams are all of its members (PoolState)
	panic bool

	mu      sync.Mutex // smooth weighted round robin
	current []int
	total   int
}

// pick returns the upstream a request goes to and the one a retry goes to.
func (sv *serving) pick() (int, int) {
	n := len(sv.upstreams)
	if sv.uniform || n == 1 {
		i := int((sv.next.Add(1) - 1) % uint64(n))
		return i, (i + 1) % n
	}
	sv.mu.Lock()
	best := 0
	for i, u := range sv.upstreams {
		sv.current[i] += u.weight
		if sv.current[i] > sv.current[best] {
			best = i
		}
	}
	sv.current[best] -= sv.total
	sv.mu.Unlock()
	return best, (best + 1) % n
}

// verdict is what the routes view says of one instance.
type verdict struct {
	eligibility string
	weight      int
	panic       bool
	excluded    bool // forced out by an operator: no member of the pool, never sent a request
}

// servingFor builds the serving state of route e: its upstreams that are in rotation, at
// their weights; from a registry without the eligibility engine, all of them at 100. Panic is
// judged on the route's own pool, as Envoy judges it per cluster: when fewer than the panic
// threshold of the route's (non-draining) upstreams are in rotation, all of them serve at 100
// — a route pinned to one provider is never left without upstreams because the capability's
// wider group is not in panic. The registry's group panic still applies to its members.
func (g *Gateway) servingFor(e *routing.Entry, verdicts map[string]verdict, gens map[string]int64, tallies map[incarnation]*tally) *serving {
	sv := &serving{uniform: true, maxStale: g.maxStaleOf(e)}
	var pool apiv1.Pool // the route's upstreams, by the panic rule (never-admitted ones apart)
	for _, u := range e.Upstreams {
		if v := verdicts[u.Instance]; !v.excluded {
			pool.Add(v.eligibility, false)
		}
	}
	newPool, poolPanic := pool.New(), pool.Panic(g.cfg.PanicThreshold)
	sv.panic = poolPanic
	for _, u := range e.Upstreams {
		pu, err := url.Parse(u.Endpoint)
		if err != nil || pu.Host == "" {
			continue
		}
		weight := 100
		if v, ok := verdicts[u.Instance]; ok && v.eligibility != "" {
			switch {
			case v.excluded:
				continue // an operator forced it out: not even in panic
			case apiv1.InRotation(v.eligibility) && !v.panic && !poolPanic:
				weight = max(v.weight, 1)
			case apiv1.InRotation(v.eligibility), v.panic && v.eligibility != apiv1.EligibilityDraining:
				// in rotation under panic, or out of rotation in a group the registry says is in panic
				sv.panic = sv.panic || v.panic
			case v.eligibility == apiv1.EligibilityEvacuated:
				continue // its zone is evacuated: not even in panic
			case v.eligibility == apiv1.EligibilityUnknown && !newPool:
				continue // never admitted, beside members that were: not before a probe
			case poolPanic && v.eligibility != apiv1.EligibilityDraining && v.eligibility != apiv1.EligibilityAbsent:
				// out of rotation, in a pool under the threshold: all its members serve
			default:
				continue
			}
		}
		k := incarnation{u.Instance, gens[u.Instance]}
		t := tallies[k]
		if t == nil && k.instance != "" {
			t = &tally{}
			tallies[k] = t
		}
		sv.upstreams = append(sv.upstreams, upstream{url: pu, weight: weight, tally: t, instance: u.Instance, eligibility: verdicts[u.Instance].eligibility})
		sv.total += weight
		if weight != sv.upstreams[0].weight {
			sv.uniform = false
		}
	}
	sv.current = make([]int, len(sv.upstreams))
	return sv
}

// ReportOutcomes sends the current window's per-instance outcomes to the registry (POST
// /v1/outcomes) and starts a new window. Run calls it every OutcomeWindow.
func (g *Gateway) ReportOutcomes(ctx context.Context) {
	g.talliesMu.Lock()
	var out []apiv1.Outcome
	for k, t := range g.tallies {
		if o, ok := t.Take(k.instance, k.generation); ok && o.Generation > 0 {
			out = append(out, o)
		}
	}
	g.talliesMu.Unlock()
	for len(out) > 0 {
		n := min(len(out), apiv1.MaxOutcomes)
		if err := g.cfg.Discovery.ReportOutcomes(ctx, &apiv1.OutcomesRequest{GatewayID: g.cfg.ID, Outcomes: out[:n]}); err != nil && ctx.Err() == nil {
			g.cfg.Logger.Warn("outcome report failed; this window's passive evidence is dropped", slog.Any("error", err))
			return
		}
		out = out[n:]
	}
}

// verdictsOf indexes the routes view's verdicts and generations by instance.
func verdictsOf(r *discovery.RoutesResult) (map[string]verdict, map[string]int64) {
	vs := make(map[string]verdict, len(r.Manifests))
	gens := make(map[string]int64, len(r.Manifests))
	for _, m := range r.Manifests {
		vs[m.InstanceID] = verdict{eligibility: m.Eligibility, weight: m.Weight, panic: m.Panic, excluded: m.Excluded}
		gens[m.InstanceID] = m.Generation
	}
	return vs, gens
}

// maxStaleOf is route e's bound on serving from a last-known-good view: the strictest of its
// manifest's max_stale and the policy's for every prefix its pattern is under; 0: none.
func (g *Gateway) maxStaleOf(e *routing.Entry) time.Duration {
	d, _ := apiv1.ParseMaxStale(e.MaxStale) // valid: the manifest was
	for prefix, p := range g.cfg.MaxStale {
		if p > 0 && routing.Granted(e.Pattern, []string{prefix}) && (d == 0 || p < d) {
			d = p
		}
	}
	return d
}
