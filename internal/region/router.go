// Package region sends each request to a region: the consumer's home region while it is on
// and its pool for the request is ready, else the next region of the priority order that is
// on and ready — each region served by its own gateway, from its own registry's view, never
// merged. Which regions are on comes from the routing control (internal/routingcontrol),
// never from a registry. A region that comes back on gets its share back in capped steps,
// each held while the region is an outlier against the others.
package region

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/gateway"
)

// Pool is a region's gateway, as the router uses it.
type Pool interface {
	http.Handler
	PoolState(r *http.Request) gateway.PoolState
	ViewSource() (discovery.Source, time.Duration)
}

// Config configures a Router: the plan's settings (Home, Signal, the way back; Others is
// derived from Priority and Regions) and each region's gateway.
type Config struct {
	PlanConfig
	// Regions holds each region's gateway, home's included.
	Regions map[string]Pool
	// Priority is the order the other regions are tried in after home (default: their
	// names in order). Regions it leaves out come after it, by name.
	Priority []string
	// Admin serves the gateway's own endpoints (default: home's gateway).
	Admin http.Handler
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if _, ok := c.Regions[c.Home]; !ok {
		errs = append(errs, fmt.Errorf("no gateway for the home region %q", c.Home))
	}
	for _, name := range c.Priority {
		if _, ok := c.Regions[name]; !ok {
			errs = append(errs, fmt.Errorf("--region-priority names %q, which is neither home nor a --peer-registry", name))
		}
	}
	return errors.Join(errs...)
}

// Order is home, then priority, then the other names of regions, sorted.
func Order(home string, priority []string, regions []string) []string {
	order := []string{home}
	for _, name := range priority {
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	var rest []string
	for _, name := range regions {
		if !slices.Contains(order, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	return append(order, rest...)
}

// Router is the http.Handler of a regional gateway.
type Router struct {
	cfg      Config
	plan     *Plan
	pools    []Pool // in the plan's order
	admin    http.Handler
	requests *prometheus.CounterVec
	// counted are requests' series by why, then region index: resolved once, not by label
	// on every request
	counted map[string][]prometheus.Counter
}

// New returns a Router; Run keeps its plan current.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("regions: %w", err)
	}
	var names []string
	for name := range cfg.Regions {
		names = append(names, name)
	}
	order := Order(cfg.Home, cfg.Priority, names)
	pc := cfg.PlanConfig
	pc.Others = order[1:]
	plan, err := NewPlan(pc)
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, plan: plan, admin: cfg.Admin}
	if r.admin == nil {
		r.admin = cfg.Regions[cfg.Home]
	}
	for _, name := range order {
		r.pools = append(r.pools, cfg.Regions[name])
	}
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_region_requests_total",
		Help: "Requests a regional gateway sent to each region, by why: home (its home region, ready), spill (home off, not ready or on its way back: the next region on and ready), panic (no region on was ready: home's panic answer, or the first on region with any pool), retry (every upstream of the region chosen first refused the connection: sent once more to the next region on and ready)."},
		[]string{"region", "why"})
	r.counted = map[string][]prometheus.Counter{}
	for _, why := range []string{"home", "spill", "panic", "retry"} {
		for _, name := range order {
			r.counted[why] = append(r.counted[why], r.requests.WithLabelValues(name, why))
		}
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.requests); err != nil {
			return nil, fmt.Errorf("register region metrics: %w", err)
		}
	}
	return r, nil
}

// Plan is the router's plan.
func (r *Router) Plan() *Plan { return r.plan }

// ServeHTTP sends the request to the region choose picks, through that region's gateway.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case apiv1.PathGatewayRegions:
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			httpapi.WriteError(w, apiv1.Errorf(http.StatusMethodNotAllowed, apiv1.CodeMethodNotAllowed, "%s is not allowed on %s", req.Method, req.URL.Path))
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, r.Status())
		return
	case apiv1.PathGatewayRoutes, apiv1.PathGatewayRouteHealth, apiv1.PathInvalidate:
		r.admin.ServeHTTP(w, req)
		return
	}
	i, why := r.choose(req)
	if i < 0 {
		w.Header().Set("Retry-After", "5")
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable,
			"no region that is on has an upstream for %s %s (home region %s is off)", req.Method, req.URL.Path, r.cfg.Home))
		return
	}
	name := r.plan.names[i]
	r.counted[why][i].Inc()
	sw := &httpapi.StatusWriter{ResponseWriter: w}
	w.Header().Set("X-MeshFlows-Region", name)
	var d *gateway.Decline
	if len(r.pools) > 1 {
		var ctx context.Context
		ctx, d = gateway.WithDecline(req.Context())
		req = req.WithContext(ctx)
	}
	r.pools[i].ServeHTTP(sw, req)
	if d == nil || !d.Declined {
		r.plan.Record(i, sw.Status >= 500)
		return
	}
	// Every upstream of region i refused the connection and nothing was sent: one more
	// try, in the next region that is on and ready (a region whose last instances just died,
	// before its registry withdrew them).
	r.plan.Record(i, true)
	j := r.alternative(req, i)
	if j < 0 {
		httpapi.WriteError(w, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable,
			"upstream failed: %v; no other region is on and ready for %s %s", d.Err, req.Method, req.URL.Path))
		return
	}
	if d.Body != nil {
		b, err := d.Body()
		if err != nil {
			httpapi.WriteError(w, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "upstream failed: %v", d.Err))
			return
		}
		req.Body = b
	}
	req = req.WithContext(gateway.WithoutDecline(req.Context())) // this one answers, whatever happens
	name = r.plan.names[j]
	r.counted["retry"][j].Inc()
	w.Header().Set("X-MeshFlows-Region", name)
	sw.Status = 0
	r.pools[j].ServeHTTP(sw, req)
	r.plan.Record(j, sw.Status >= 500)
}

// alternative is the first region other than i that is on and ready for req, ignoring the
// way back's draws (-1: none).
func (r *Router) alternative(req *http.Request, i int) int {
	for j := range r.pools {
		if j != i && r.plan.On(j) && r.pools[j].PoolState(req) == gateway.PoolReady {
			return j
		}
	}
	return -1
}

// choose picks the region of a request: the first of the order that is on, ready for it
// and, when on its way back, draws within its share; else home's answer when home is on;
// else the first region on with any pool for it. -1: none.
func (r *Router) choose(req *http.Request) (int, string) {
	var states [8]gateway.PoolState // the pools asked, by order (most consumers know few regions)
	ask := func(i int) gateway.PoolState {
		if i < len(states) {
			if states[i] == 0 {
				states[i] = r.pools[i].PoolState(req) + 1
			}
			return states[i] - 1
		}
		return r.pools[i].PoolState(req)
	}
	return Choose(r.plan, len(r.pools), func(i int) Readiness {
		switch ask(i) {
		case gateway.PoolReady:
			return Ready
		case gateway.PoolPanic:
			return Panic
		}
		return None
	})
}

// Readiness is how a region's pool for one request stands.
type Readiness int

const (
	None  Readiness = iota // nothing to serve it with
	Panic                  // its pool is in panic
	Ready                  // in-rotation members, not in panic
)

// Choose applies where a request goes to n regions of plan, whose pools stand as ready
// says (asked lazily, in order): the first region that is on, ready and, on its way back,
// draws within its share ("home" or "spill"); else home when it is on ("panic", or "home"
// when only its share's draw turned it down); else the first region on with any pool
// ("panic"). -1: none.
func Choose(plan *Plan, n int, ready func(i int) Readiness) (int, string) {
	for i := range n {
		if !plan.On(i) || ready(i) != Ready || !plan.Admit(i) {
			continue
		}
		if i == 0 {
			return 0, "home"
		}
		return i, "spill"
	}
	if plan.On(0) {
		if ready(0) == Ready {
			return 0, "home" // on its way back and beyond its share, but no other region is ready
		}
		return 0, "panic"
	}
	for i := range n {
		if plan.On(i) && ready(i) != None {
			return i, "panic"
		}
	}
	return -1, ""
}

// Status is GET /v1/gateway/regions.
func (r *Router) Status() apiv1.GatewayRegions {
	sig, regions := r.plan.Status()
	out := apiv1.GatewayRegions{Home: r.cfg.Home, Signal: sig, Priority: r.plan.Names(), Regions: regions}
	for i := range out.Regions {
		src, age := r.pools[i].ViewSource()
		out.Regions[i].ViewSource, out.Regions[i].ViewAge = string(src), int64(age/time.Second)
	}
	return out
}

// Run keeps the plan current until ctx ends.
func (r *Router) Run(ctx context.Context) error { return r.plan.Run(ctx) }
