package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/routingcontrol"
)

// Signal is the routing control as a consumer holds it.
type Signal interface {
	View() *routingcontrol.View
}

// DefaultSteps are the shares of the capped way back, before all of it.
var DefaultSteps = []float64{0.01, 0.05, 0.25, 0.50}

// PlanConfig configures a Plan.
type PlanConfig struct {
	// Home is the consumer's own region; Others the other regions in the order they are
	// tried after home.
	Home   string
	Others []string
	// Signal is the routing control; nil: every region is on.
	Signal Signal
	// Steps are the shares of the way back (default DefaultSteps); Dwell how long each
	// holds at least (default 60 s).
	Steps []float64
	Dwell time.Duration
	// Tick is how often Run reads the signal and moves ramps (default 100 ms).
	Tick time.Duration
	// The outlier test of a returning region against the others, over Window (default 60 s):
	// at least MinVolume requests (default 100) on each side, and the Wilson lower bound at
	// Z (default 3) of its error share above the others' median share plus Floor (default
	// 0.01) and above Factor (default 3) times it.
	Window     time.Duration
	MinVolume  int
	Z          float64
	Floor      float64
	Factor     float64
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// Rand returns a number in [0, 1) (default math/rand/v2).
	Rand func() float64
}

// Validate reports a configuration that cannot work.
func (c *PlanConfig) Validate() error {
	var errs []error
	if c.Home == "" {
		errs = append(errs, errors.New("no home region"))
	}
	seen := map[string]bool{c.Home: true}
	for _, r := range c.Others {
		if seen[r] {
			errs = append(errs, fmt.Errorf("region %q given twice", r))
		}
		seen[r] = true
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

func (c *PlanConfig) defaults() {
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

// Plan is a consumer's regions: which are on (the routing control's signal), the share of
// each on its way back, and their outcomes. It is safe for concurrent use; Run keeps it
// current.
type Plan struct {
	cfg     PlanConfig
	names   []string // home first, then Others
	index   map[string]int
	regions []*ramp
	current atomic.Pointer[shares]
	share   *prometheus.GaugeVec

	mu sync.Mutex // the ramps (Update, Status)
}

// ramp is one region's way back and its outcomes.
type ramp struct {
	outcome outcomes

	// under Plan.mu
	seen      bool // looked at once
	wasOn     bool
	ramping   bool
	step      int
	stepSince time.Time
	held      bool
}

// shares is what requests read: whether each region is on, and its share.
type shares struct {
	on    []bool
	share []float64
}

// NewPlan returns a Plan with the signal applied once.
func NewPlan(cfg PlanConfig) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("regions: %w", err)
	}
	cfg.defaults()
	p := &Plan{cfg: cfg, names: append([]string{cfg.Home}, cfg.Others...), index: map[string]int{}}
	for i, n := range p.names {
		p.index[n] = i
		p.regions = append(p.regions, &ramp{outcome: outcomes{window: cfg.Window}})
	}
	p.share = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_region_share",
		Help: "The share of what each region would get from this consumer that it gets now: 1, a step of its way back after it came back on, 0 while off."},
		[]string{"region"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(p.share); err != nil {
			return nil, fmt.Errorf("register region metrics: %w", err)
		}
	}
	p.Update()
	return p, nil
}

// Names are the regions in the order they are tried: home first.
func (p *Plan) Names() []string { return slices.Clone(p.names) }

// Run reads the signal and moves the ramps every Tick until ctx ends.
func (p *Plan) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Update()
		}
	}
}

// On says whether the region of index i is on.
func (p *Plan) On(i int) bool { return p.current.Load().on[i] }

// OnNamed says whether region is on; a region the plan does not know is off.
func (p *Plan) OnNamed(region string) bool {
	i, ok := p.index[region]
	return ok && p.On(i)
}

// Admit draws whether a request the region of index i is ready for goes to it: always,
// unless it is on its way back, then with its share's chance.
func (p *Plan) Admit(i int) bool {
	s := p.current.Load().share[i]
	return s >= 1 || p.cfg.Rand() < s
}

// AdmitNamed is Admit by name.
func (p *Plan) AdmitNamed(region string) bool {
	i, ok := p.index[region]
	return ok && p.Admit(i)
}

// Record counts a request the region of index i served, failed or not, for the outlier
// test of its way back.
func (p *Plan) Record(i int, failed bool) { p.regions[i].outcome.add(p.cfg.Now(), failed) }

// Update applies the signal to the ramps and publishes the shares.
func (p *Plan) Update() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var view *routingcontrol.View
	if p.cfg.Signal != nil {
		view = p.cfg.Signal.View()
	}
	now := p.cfg.Now()
	whole := time.Duration(len(p.cfg.Steps)) * p.cfg.Dwell
	s := &shares{on: make([]bool, len(p.regions)), share: make([]float64, len(p.regions))}
	for i, g := range p.regions {
		name := p.names[i]
		on := view == nil || view.On(name)
		s.on[i] = on
		switch {
		case !on:
			if g.seen && g.wasOn {
				p.cfg.Logger.Warn("region switched off: it gets no request", slog.String("region", name))
			}
			g.ramping, g.held = false, false
		case !g.seen:
			// A consumer that starts while a region is on its way back starts the way back
			// from its first step.
			if view != nil && view.Read {
				if sw, ok := view.Signal.Regions[name]; ok && !sw.ReturnedAt.IsZero() && now.Sub(sw.ReturnedAt) < whole {
					p.startRamp(g, name, now)
				}
			}
		case !g.wasOn:
			p.startRamp(g, name, now)
		case g.ramping && now.Sub(g.stepSince) >= p.cfg.Dwell:
			if p.outlier(i, now) {
				if !g.held {
					p.cfg.Logger.Warn("region's way back held: it is an outlier against the other regions", slog.String("region", name),
						slog.Float64("share", p.cfg.Steps[g.step]))
				}
				g.held = true
				break
			}
			g.held = false
			g.step++
			g.stepSince = now
			if g.step >= len(p.cfg.Steps) {
				g.ramping = false
				p.cfg.Logger.Info("region back at its whole share", slog.String("region", name))
			}
		}
		g.seen, g.wasOn = true, on
		switch {
		case !on:
			s.share[i] = 0
		case g.ramping:
			s.share[i] = p.cfg.Steps[g.step]
		default:
			s.share[i] = 1
		}
		p.share.WithLabelValues(name).Set(s.share[i])
	}
	p.current.Store(s)
}

func (p *Plan) startRamp(g *ramp, name string, now time.Time) {
	if len(p.cfg.Steps) == 0 {
		return
	}
	g.ramping, g.step, g.stepSince, g.held = true, 0, now, false
	p.cfg.Logger.Info("region on: its share comes back in steps", slog.String("region", name),
		slog.Any("steps", p.cfg.Steps), slog.Duration("dwell", p.cfg.Dwell))
}

// outlier applies the outlier test to region i against the others over the window.
func (p *Plan) outlier(i int, now time.Time) bool {
	n, errs := p.regions[i].outcome.sum(now)
	if n < p.cfg.MinVolume {
		return false
	}
	var others []float64
	for j, o := range p.regions {
		if j == i {
			continue
		}
		if on, oe := o.outcome.sum(now); on >= p.cfg.MinVolume {
			others = append(others, float64(oe)/float64(on))
		}
	}
	if len(others) == 0 {
		return false
	}
	slices.Sort(others)
	base := others[len(others)/2]
	if len(others)%2 == 0 {
		base = (others[len(others)/2-1] + base) / 2
	}
	l := wilsonLower(errs, n, p.cfg.Z)
	return l > base+p.cfg.Floor && l > p.cfg.Factor*base
}

// wilsonLower is the lower bound of the Wilson score interval of errs/n at z.
func wilsonLower(errs, n int, z float64) float64 {
	r, nf := float64(errs)/float64(n), float64(n)
	z2 := z * z
	return (r + z2/(2*nf) - z*math.Sqrt(r*(1-r)/nf+z2/(4*nf*nf))) / (1 + z2/nf)
}

// Status is each region as the plan holds it, and the signal, for a consumer's status.
func (p *Plan) Status() (apiv1.SignalView, []apiv1.RegionRoute) {
	sig := apiv1.SignalView{Configured: p.cfg.Signal != nil}
	if p.cfg.Signal != nil {
		v := p.cfg.Signal.View()
		sig.Read, sig.Stale, sig.Revision, sig.ReadAt, sig.Error = v.Read, v.Stale, v.Revision, v.ReadAt, v.Error
	}
	s := p.current.Load()
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]apiv1.RegionRoute, len(p.regions))
	for i, g := range p.regions {
		n, e := g.outcome.sum(now)
		out[i] = apiv1.RegionRoute{Region: p.names[i], On: s.on[i], Share: s.share[i], Ramping: g.ramping, Held: g.held, Requests: n, Errors: e}
		if g.ramping {
			out[i].Step, out[i].StepSince = g.step, g.stepSince.UTC()
			out[i].Outlier = p.outlier(i, now)
		}
	}
	return sig, out
}

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
