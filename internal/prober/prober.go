package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/internal/health"
)

// Defaults of Config.
const (
	DefaultConcurrency = 64
	DefaultTimeout     = 2 * time.Second
	DefaultTick        = 100 * time.Millisecond
)

// Target is one instance incarnation to probe, as its manifest declares.
type Target struct {
	ID         string
	Generation int64
	// URL is the instance's endpoint joined with the manifest's health.path.
	URL string
	// Interval is the manifest's health.interval: never replaced by a default.
	Interval time.Duration
	// Service names the instance's service: the probe latency histogram is by service (a
	// slow health endpoint is a service's signal; never by instance).
	Service string
}

// Result is one probe's outcome for the registry.
type Result struct {
	Target  Target
	At      time.Time
	Result  string // ok, fail, timeout or refused
	Latency time.Duration
	Detail  string
	// Impostor is the instance a 2xx health answer named when it was not the target: the
	// probe is refused, since what answers at the address is not the registered instance.
	Impostor string
}

// Config configures a Prober.
type Config struct {
	// Targets returns what to probe now (called every tick).
	Targets func() []Target
	// Report receives every result.
	Report func(Result)
	// Leader says whether this replica probes (with the etcd store only the elected one
	// does); nil: always.
	Leader func() bool
	// Concurrency bounds probes in flight (default 64); a probe that finds no slot waits
	// for the next tick.
	Concurrency int
	// Timeout bounds one probe (default 2 s, and never more than the target's interval).
	Timeout time.Duration
	// Tick is how often due probes are looked for (default 100 ms).
	Tick time.Duration
	// AdmissionProbes is how many probes of a new incarnation come quickly — the first
	// within AdmissionSpacing of its registration, the others AdmissionSpacing apart — before
	// the declared interval applies (defaults: 1, and 1 s or the interval if shorter). The
	// default probes once at registration (jittered within a second), then at the manifest's
	// health.interval and never another: the protocol forbids substituting an interval for the
	// one a service declares. A service that wants to be admitted quickly declares a short one.
	AdmissionProbes  int
	AdmissionSpacing time.Duration
	// Client sends the probes (default: a client without keep-alives' surprises).
	Client *http.Client
	// Now is the clock; Jitter returns a random duration in [0, d) (defaults: real ones).
	Now    func() time.Time
	Jitter func(d time.Duration) time.Duration
	// Logger receives changes of a target's result; nil is silent.
	Logger *slog.Logger
	// Registerer receives the probe metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.AdmissionProbes == 0 {
		c.AdmissionProbes = 1
	}
	if c.AdmissionSpacing == 0 {
		c.AdmissionSpacing = time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Jitter == nil {
		c.Jitter = func(d time.Duration) time.Duration {
			if d <= 0 {
				return 0
			}
			return rand.N(d)
		}
	}
	if c.Leader == nil {
		c.Leader = func() bool { return true }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.Targets == nil || c.Report == nil:
		return errors.New("prober: Targets and Report are required")
	case c.Concurrency < 1:
		return fmt.Errorf("prober: concurrency %d is under 1", c.Concurrency)
	case c.Timeout <= 0 || c.Tick <= 0:
		return errors.New("prober: timeout and tick must be positive")
	}
	return nil
}

type probeKey struct {
	id  string
	gen int64
}

// Prober probes every target at its declared interval, jittered so that probes do not
// align, with bounded concurrency and a timeout per probe.
type Prober struct {
	cfg      Config
	slots    chan struct{}
	wg       sync.WaitGroup
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu       sync.Mutex
	next     map[probeKey]time.Time
	inFlight map[probeKey]bool
	last     map[probeKey]string
	launched map[probeKey]int // probes launched per incarnation, up to AdmissionProbes
	// targets is the list the last Step reconciled with: the same list again (Targets
	// answers from a cache while the fleet stands still) needs no reconciliation
	targets []Target
}

// New returns a prober with cfg.
func New(cfg Config) (*Prober, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Prober{cfg: cfg, slots: make(chan struct{}, cfg.Concurrency),
		next: map[probeKey]time.Time{}, inFlight: map[probeKey]bool{}, last: map[probeKey]string{}, launched: map[probeKey]int{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_probes_total",
			Help: "Active health probes, by result (ok, fail, timeout, refused)."}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshflows_probe_duration_seconds",
			Help: "Latency of active health probes, by result and service.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}, []string{"result", "service"}),
	}
	for _, r := range []string{health.ProbeOK, health.ProbeFail, health.ProbeTimeout, health.ProbeRefused} { // every series exists from the start
		p.total.WithLabelValues(r)
		p.duration.WithLabelValues(r, "") // the family exists before the first probe
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{p.total, p.duration} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register probe metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Run probes until ctx ends, then waits for the probes in flight.
func (p *Prober) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Tick)
	defer t.Stop()
	defer p.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Step(ctx, p.cfg.Now())
		}
	}
}

// Wait blocks until every probe launched has reported.
func (p *Prober) Wait() { p.wg.Wait() }

// Step launches the probes due at now and returns how many it launched. A new target is
// first probed at a random point of its first AdmissionSpacing (or interval, if shorter),
// and its first AdmissionProbes probes come that far apart (by default there is one); after
// them each probe schedules the next one interval later, give or take a tenth.
func (p *Prober) Step(ctx context.Context, now time.Time) int {
	if !p.cfg.Leader() {
		return 0
	}
	targets := p.cfg.Targets()
	p.mu.Lock()
	defer p.mu.Unlock()
	same := len(targets) == len(p.targets) && (len(targets) == 0 || &targets[0] == &p.targets[0])
	var live map[probeKey]struct{}
	if !same {
		live = make(map[probeKey]struct{}, len(targets))
	}
	p.targets = targets
	launched := 0
	for _, t := range targets {
		if t.Interval <= 0 {
			continue
		}
		k := probeKey{t.ID, t.Generation}
		if live != nil {
			live[k] = struct{}{}
		}
		quick := min(t.Interval, p.cfg.AdmissionSpacing)
		due, ok := p.next[k]
		if !ok {
			p.next[k] = now.Add(p.cfg.Jitter(quick))
			continue
		}
		if now.Before(due) || p.inFlight[k] {
			continue
		}
		select {
		case p.slots <- struct{}{}:
		default:
			continue // every slot busy: this one waits for the next tick
		}
		p.inFlight[k] = true
		every := t.Interval
		if n := p.launched[k]; n < p.cfg.AdmissionProbes {
			p.launched[k] = n + 1
			if n+1 < p.cfg.AdmissionProbes {
				every = quick // admission: the next probe soon
			}
		}
		p.next[k] = now.Add(every - every/10 + p.cfg.Jitter(every/5+1))
		launched++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			res := p.probe(ctx, t)
			<-p.slots
			p.mu.Lock()
			delete(p.inFlight, k)
			prev, seen := p.last[k]
			p.last[k] = res.Result
			p.mu.Unlock()
			if seen && prev != res.Result {
				p.cfg.Logger.Info("probe result changed", slog.String("instance_id", t.ID), slog.String("from", prev),
					slog.String("to", res.Result), slog.String("detail", res.Detail))
			}
			p.cfg.Report(res)
		}()
	}
	if same {
		return launched
	}
	for k := range p.next {
		if _, ok := live[k]; !ok {
			delete(p.next, k)
			delete(p.launched, k)
			delete(p.last, k)
		}
	}
	return launched
}

// probe sends one GET and classifies the answer: 2xx is ok; another status fail; a refused
// or reset connection refused; no answer within the timeout timeout; anything else fail. A
// 2xx JSON answer that names an instance_id other than the target's is refused too: another
// process answers at the registered address (a zombie registration), so the instance is not
// there, as surely as when the port is closed.
func (p *Prober) probe(ctx context.Context, t Target) Result {
	timeout := min(p.cfg.Timeout, t.Interval)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res := Result{Target: t, Result: health.ProbeOK}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err == nil {
		req.Header.Set("User-Agent", "meshflows-prober")
		var resp *http.Response
		if resp, err = p.cfg.Client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			switch id := answeredAs(body); {
			case resp.StatusCode < 200 || resp.StatusCode > 299:
				res.Result, res.Detail = health.ProbeFail, "status "+resp.Status
			case id != "" && id != t.ID:
				res.Result, res.Impostor = health.ProbeRefused, id
				res.Detail = fmt.Sprintf("the health endpoint answers as instance %q", id)
			}
		}
	}
	if err != nil {
		res.Result, res.Detail = classify(err), err.Error()
	}
	res.Latency = time.Since(start)
	res.At = p.cfg.Now()
	p.total.WithLabelValues(res.Result).Inc()
	p.duration.WithLabelValues(res.Result, res.Target.Service).Observe(res.Latency.Seconds())
	return res
}

// answeredAs is the instance_id a JSON health answer names ("" when it names none).
func answeredAs(body []byte) string {
	var named struct {
		InstanceID string `json:"instance_id"`
	}
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &named) != nil {
		return ""
	}
	return named.InstanceID
}

// classify names a transport error: refused (connection refused or reset), timeout, or fail.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
		return health.ProbeRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return health.ProbeTimeout
	default:
		return health.ProbeFail
	}
}
