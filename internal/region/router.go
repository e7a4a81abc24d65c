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
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/routingcontrol"
)

// Pool is a region's gateway, as the router uses it.
type Pool interface {
	http.Handler
	PoolState(r *http.Request) gateway.PoolState
	ViewSource() (discovery.Source, time.Duration)
}

// Signal is the routing control as a consumer holds it.
type Signal interface {
	View() *routingcontrol.View
}

// DefaultSteps are the shares of the capped way back, before all of it.
var DefaultSteps = []float64{0.01, 0.05, 0.25, 0.50}

// Config configures a Router.
type Config struct {
	// Home is the consumer's own region.
	Home string
	// Regions holds each region's gateway, home's included.
	Regions map[string]Pool
	// Priority is the order the other regions are tried in after home (default: their
	// names in order). Regions it leaves out come after it, by name.
	Priority []string
	// Signal is the routing control; nil: every region is on.
	Signal Signal
	// Steps are the shares of the way back (default DefaultSteps); Dwell how long each
	// holds at least (default 60 s).
	Steps []float64
	Dwell time.Duration
	// Tick is how often the router reads the signal and moves ramps (default 100 ms).
	Tick time.Duration
	// The outlier test of a returning region against the others, over Window (default 60 s):
	// at least MinVolume requests (default 100) on each side, and the Wilson lower bound at
	// Z (default 3) of its error share above the others' median share plus Floor (default
	// 0.01) and above Factor (default 3) times it.
	Window    time.Duration
	MinVolume int
	Z         float64
	Floor     float64
	Factor    float64
	// Admin serves the gateway's own endpoints (default: home's gateway).
	Admin      http.Handler
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// Rand returns a number in [0, 1) (default math/rand/v2).
	Rand func() float64
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Home == "" {
		errs = append(errs, errors.New("no home region"))
	}
	if _, ok := c.Regions[c.Home]; !ok {
		errs = append(errs, fmt.Errorf("no gateway for the home region %q", c.Home))
	}
	for _, name := range c.Priority {
		if _, ok := c.Regions[name]; !ok {
			errs = append(errs, fmt.Errorf("--region-priority names %q, which is neither home nor a --peer-registry", name))
		}
	}
	for _, s := range c.Steps {
		if s <= 0 || s >= 1 {
			errs = append(errs, fmt.Errorf("return step %v: want a share between 0 and 1", s))
		}
	}
	if c.Dwell < 0 {
		errs = append(errs, fmt.Errorf("return dwell %s is negative", c.Dwell))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	if c.Steps == nil {
		c.Steps = DefaultSteps
	}
	if c.Dwell == 0 {
		c.Dwell = time.Minute
	}
	if c.Tick <= 0 {
		c.Tick = 100 * time.Millisecond
	}
	if c.Window <= 0 {
		c.Window = time.Minute
	}
	if c.MinVolume <= 0 {
		c.MinVolume = 100
	}
	if c.Z <= 0 {
		c.Z = 3
	}
	if c.Floor <= 0 {
		c.Floor = 0.01
	}
	if c.Factor <= 0 {
		c.Factor = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Router is the http.Handler of a regional gateway.
type Router struct {
	cfg     Config
	regions []*region // home first, then the priority order
	plan    atomic.Pointer[plan]
	admin   http.Handler

	requests *prometheus.CounterVec
	share    *prometheus.GaugeVec

	rampMu sync.Mutex // the ramps (Run's goroutine, and Status)
}

// region is one region's gateway, its outcomes and its way back.
type region struct {
	name    string
	pool    Pool
	outcome outcomes

	// the ramp (under Router.rampMu)
	seen      bool // looked at once
	wasOn     bool
	ramping   bool
	step      int
	stepSince time.Time
	held      bool
}

// plan is what requests read: whether each region is on and its share.
type plan struct {
	on    []bool
	share []float64
}

// New returns a Router; Run keeps its plan current.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("regions: %w", err)
	}
	cfg.defaults()
	order := []string{cfg.Home}
	for _, name := range cfg.Priority {
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	var rest []string
	for name := range cfg.Regions {
		if !slices.Contains(order, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	order = append(order, rest...)
	r := &Router{cfg: cfg, admin: cfg.Admin}
	if r.admin == nil {
		r.admin = cfg.Regions[cfg.Home]
	}
	for _, name := range order {
		r.regions = append(r.regions, &region{name: name, pool: cfg.Regions[name], outcome: outcomes{window: cfg.Window}})
	}
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_region_requests_total",
		Help: "Requests a regional consumer sent to each region, by why: home (its home region, ready), spill (home off, not ready or ramping: the next region on and ready), panic (no region on was ready: home's panic answer, or the first on region with any pool)."},
		[]string{"region", "why"})
	r.share = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_region_share",
		Help: "The share of what each region would get that it gets now: 1, a step of its way back after it came back on, 0 while off."},
		[]string{"region"})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.requests, r.share} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register region metrics: %w", err)
			}
		}
	}
	r.update()
	return r, nil
}

// Run reads the signal and moves the ramps every Tick until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.update()
		}
	}
}

// update applies the signal to the ramps and publishes the plan.
func (r *Router) update() {
	r.rampMu.Lock()
	defer r.rampMu.Unlock()
	var view *routingcontrol.View
	if r.cfg.Signal != nil {
		view = r.cfg.Signal.View()
	}
	now := r.cfg.Now()
	whole := time.Duration(len(r.cfg.Steps)) * r.cfg.Dwell
	p := &plan{on: make([]bool, len(r.regions)), share: make([]float64, len(r.regions))}
	for i, g := range r.regions {
		on := view == nil || view.On(g.name)
		p.on[i] = on
		switch {
		case !on:
			if g.seen && g.wasOn {
				r.cfg.Logger.Warn("region switched off: it gets no request", slog.String("region", g.name))
			}
			g.ramping, g.held = false, false
		case !g.seen:
			// A consumer that starts while a region is on its way back starts the way back
			// from its first step.
			if view != nil && view.Read {
				if sw, ok := view.Signal.Regions[g.name]; ok && !sw.ReturnedAt.IsZero() && now.Sub(sw.ReturnedAt) < whole {
					r.startRamp(g, now)
				}
			}
		case !g.wasOn:
			r.startRamp(g, now)
		case g.ramping && now.Sub(g.stepSince) >= r.cfg.Dwell:
			if r.outlier(g, now) {
				if !g.held {
					r.cfg.Logger.Warn("region's way back held: it is an outlier against the other regions", slog.String("region", g.name),
						slog.Float64("share", r.cfg.Steps[g.step]))
				}
				g.held = true
				break
			}
			g.held = false
			g.step++
			g.stepSince = now
			if g.step >= len(r.cfg.Steps) {
				g.ramping = false
				r.cfg.Logger.Info("region back at its whole share", slog.String("region", g.name))
			}
		}
		g.seen, g.wasOn = true, on
		switch {
		case !on:
			p.share[i] = 0
		case g.ramping:
			p.share[i] = r.cfg.Steps[g.step]
		default:
			p.share[i] = 1
		}
		r.share.WithLabelValues(g.name).Set(p.share[i])
	}
	r.plan.Store(p)
}

func (r *Router) startRamp(g *region, now time.Time) {
	if len(r.cfg.Steps) == 0 {
		return
	}
	g.ramping, g.step, g.stepSince, g.held = true, 0, now, false
	r.cfg.Logger.Info("region on: its share comes back in steps", slog.String("region", g.name),
		slog.Any("steps", r.cfg.Steps), slog.Duration("dwell", r.cfg.Dwell))
}

// outlier applies the outlier test to g against the other regions over the window.
func (r *Router) outlier(g *region, now time.Time) bool {
	n, errs := g.outcome.sum(now)
	if n < r.cfg.MinVolume {
		return false
	}
	var shares []float64
	for _, o := range r.regions {
		if o == g {
			continue
		}
		if on, oe := o.outcome.sum(now); on >= r.cfg.MinVolume {
			shares = append(shares, float64(oe)/float64(on))
		}
	}
	if len(shares) == 0 {
		return false
	}
	slices.Sort(shares)
	base := shares[len(shares)/2]
	if len(shares)%2 == 0 {
		base = (shares[len(shares)/2-1] + base) / 2
	}
	l := wilsonLower(errs, n, r.cfg.Z)
	return l > base+r.cfg.Floor && l > r.cfg.Factor*base
}

// wilsonLower is the lower bound of the Wilson score interval of errs/n at z.
func wilsonLower(errs, n int, z float64) float64 {
	p, nf := float64(errs)/float64(n), float64(n)
	z2 := z * z
	return (p + z2/(2*nf) - z*math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))) / (1 + z2/nf)
}

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
	i, why := r.choose(r.plan.Load(), req)
	if i < 0 {
		w.Header().Set("Retry-After", "5")
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable,
			"no region that is on has an upstream for %s %s (home region %s is off)", req.Method, req.URL.Path, r.cfg.Home))
		return
	}
	g := r.regions[i]
	r.requests.WithLabelValues(g.name, why).Inc()
	sw := &statusWriter{ResponseWriter: w}
	w.Header().Set("X-MeshFlows-Region", g.name)
	g.pool.ServeHTTP(sw, req)
	g.outcome.add(r.cfg.Now(), sw.status >= 500)
}

// choose picks the region of a request: the first of the order that is on, ready for it
// and, when on its way back, draws within its share; else home's answer when home is on;
// else the first region on with any pool for it. -1: none.
func (r *Router) choose(p *plan, req *http.Request) (int, string) {
	var states [8]gateway.PoolState // the pools asked, by order (most consumers know few regions)
	ask := func(i int) gateway.PoolState {
		if i < len(states) {
			if states[i] == 0 {
				states[i] = r.regions[i].pool.PoolState(req) + 1
			}
			return states[i] - 1
		}
		return r.regions[i].pool.PoolState(req)
	}
	for i := range r.regions {
		if !p.on[i] || ask(i) != gateway.PoolReady {
			continue
		}
		if s := p.share[i]; s < 1 && r.cfg.Rand() >= s {
			continue // on its way back: this request is beyond its share
		}
		if i == 0 {
			return 0, "home"
		}
		return i, "spill"
	}
	if p.on[0] {
		if ask(0) == gateway.PoolReady {
			return 0, "home" // ramping and beyond its share, but no other region is ready
		}
		return 0, "panic"
	}
	for i := range r.regions {
		if p.on[i] && ask(i) != gateway.PoolNone {
			return i, "panic"
		}
	}
	return -1, ""
}

// Status is GET /v1/gateway/regions.
func (r *Router) Status() apiv1.GatewayRegions {
	out := apiv1.GatewayRegions{Home: r.cfg.Home, Signal: apiv1.SignalView{Configured: r.cfg.Signal != nil}}
	if r.cfg.Signal != nil {
		v := r.cfg.Signal.View()
		out.Signal.Read, out.Signal.Stale, out.Signal.Revision, out.Signal.ReadAt, out.Signal.Error = v.Read, v.Stale, v.Revision, v.ReadAt, v.Error
	}
	p := r.plan.Load()
	now := r.cfg.Now()
	r.rampMu.Lock()
	defer r.rampMu.Unlock()
	for i, g := range r.regions {
		out.Priority = append(out.Priority, g.name)
		n, e := g.outcome.sum(now)
		src, age := g.pool.ViewSource()
		rr := apiv1.RegionRoute{Region: g.name, On: p.on[i], Share: p.share[i], Ramping: g.ramping, Held: g.held,
			Requests: n, Errors: e, ViewSource: string(src), ViewAge: int64(age / time.Second)}
		if g.ramping {
			rr.Step, rr.StepSince = g.step, g.stepSince.UTC()
			rr.Outlier = r.outlier(g, now)
		}
		out.Regions = append(out.Regions, rr)
	}
	return out
}

// statusWriter keeps the status of the answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// outcomes counts a region's requests and errors in buckets over a window.
type outcomes struct {
	window time.Duration
	mu     sync.Mutex
	bucket [outcomeBuckets]struct {
		at      int64 // the bucket's index in time
		n, errs int
	}
}

const outcomeBuckets = 12

func (o *outcomes) slot(now time.Time) int64 {
	return now.UnixNano() / int64(o.window/outcomeBuckets)
}

func (o *outcomes) add(now time.Time, failed bool) {
	at := o.slot(now)
	o.mu.Lock()
	b := &o.bucket[at%outcomeBuckets]
	if b.at != at {
		b.at, b.n, b.errs = at, 0, 0
	}
	b.n++
	if failed {
		b.errs++
	}
	o.mu.Unlock()
}

func (o *outcomes) sum(now time.Time) (n, errs int) {
	at := o.slot(now)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, b := range o.bucket {
		if b.at > at-outcomeBuckets && b.at <= at {
			n, errs = n+b.n, errs+b.errs
		}
	}
	return n, errs
}
