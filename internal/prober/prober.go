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
	// DefaultConfirmLost is how many unanswered probes in a row — the first and its
	// re-probes — confirm that an instance no longer answers (docs/reference/eligibility.md,
	// "A lost probe is not a failure").
	DefaultConfirmLost = 12
	// DefaultReprobeEvery spaces a suspect instance's re-probes; DefaultReprobeTimeout bounds
	// each — at least four times the instance's last answered probe, never more than Timeout
	// or the interval.
	DefaultReprobeEvery   = 100 * time.Millisecond
	DefaultReprobeTimeout = 500 * time.Millisecond
	// maxReprobesInFlight bounds the re-probes of one instance in flight at once.
	maxReprobesInFlight = 5
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
	// Observed is when a result held for confirmation was observed (At is when it is
	// reported); zero for one reported at once.
	Observed time.Time
	// lost: no answer came in time (a timeout): maybe lost on the way, unlike a refusal or
	// an answer that failed (a 5xx, a TLS handshake refused)
	lost bool
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
	// A suspect instance — its probe went unanswered or failed, or a consumer reported a
	// connect failure (Suspect) — is re-probed every ReprobeEvery (default 100 ms), each
	// re-probe bounded by ReprobeTimeout (default 500 ms, or four times the last answered
	// probe's latency if more), until one answers ok or ConfirmLost
	// probes in a row went unanswered (default 12; 1 reports every unanswered probe at once).
	// An unanswered probe that a re-probe answers ok was lost, not failed: it is never
	// reported, nor is the ok re-probe (re-probes confirm failures; they never speed up
	// re-entry). A failed answer (a 5xx) is evidence and reported at once; so is a refusal.
	ConfirmLost    int
	ReprobeEvery   time.Duration
	ReprobeTimeout time.Duration
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
	if c.ConfirmLost == 0 {
		c.ConfirmLost = DefaultConfirmLost
	}
	if c.ReprobeEvery == 0 {
		c.ReprobeEvery = DefaultReprobeEvery
	}
	if c.ReprobeTimeout == 0 {
		c.ReprobeTimeout = DefaultReprobeTimeout
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
	case c.Timeout <= 0 || c.Tick <= 0 || c.ReprobeEvery <= 0 || c.ReprobeTimeout <= 0:
		return errors.New("prober: timeout, tick, reprobe every and reprobe timeout must be positive")
	case c.ConfirmLost < 1:
		return fmt.Errorf("prober: confirm lost %d is under 1", c.ConfirmLost)
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
	lost     prometheus.Counter
	reprobes prometheus.Counter

	mu       sync.Mutex
	next     map[probeKey]time.Time
	inFlight map[probeKey]int
	last     map[probeKey]string
	// suspicions are the suspect incarnations being re-probed; failing those whose failure
	// was reported (their unanswered probes need no confirmation until one answers ok);
	// suspects the instance ids a consumer reported, for the next Step; suspicionSeq numbers
	// suspicions, so that a re-probe answering after its suspicion ended is dropped.
	suspicions   map[probeKey]*suspicion
	failing      map[probeKey]bool
	answered     map[probeKey]time.Duration // the latency of the last answered probe
	suspects     map[string]struct{}
	suspicionSeq uint64
	launched     map[probeKey]int // probes launched per incarnation, up to AdmissionProbes
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
		next: map[probeKey]time.Time{}, inFlight: map[probeKey]int{}, last: map[probeKey]string{}, launched: map[probeKey]int{},
		suspicions: map[probeKey]*suspicion{}, failing: map[probeKey]bool{}, suspects: map[string]struct{}{}, answered: map[probeKey]time.Duration{},
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_probes_lost_total",
			Help: "Unanswered probes that a re-probe answered ok: lost on the way, not failed, and never reported as evidence."}),
		reprobes: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_probe_reprobes_total",
			Help: "Re-probes of suspect instances (an unanswered or failed probe, or a consumer's connect failures)."}),
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
		for _, c := range []prometheus.Collector{p.total, p.duration, p.lost, p.reprobes} {
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
// them each probe schedules the next one interval later, give or take a tenth. A suspect
// target is re-probed every ReprobeEvery instead, until its suspicion ends.
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
		if len(p.suspects) > 0 {
			if _, ok := p.suspects[t.ID]; ok && p.suspicions[k] == nil && !p.failing[k] {
				p.suspect(k, p.cfg.ConfirmLost) // no probe went unanswered yet
			}
		}
		if len(p.suspicions) > 0 { // the usual case has none: no lookup per target per tick
			if s := p.suspicions[k]; s != nil {
				if p.reprobe(ctx, t, k, s, now) {
					launched++
				}
				continue
			}
		}
		quick := min(t.Interval, p.cfg.AdmissionSpacing)
		due, ok := p.next[k]
		if !ok {
			p.next[k] = now.Add(p.cfg.Jitter(quick))
			continue
		}
		if now.Before(due) || p.inFlight[k] > 0 {
			continue
		}
		select {
		case p.slots <- struct{}{}:
		default:
			continue // every slot busy: this one waits for the next tick
		}
		every := t.Interval
		if n := p.launched[k]; n < p.cfg.AdmissionProbes {
			p.launched[k] = n + 1
			if n+1 < p.cfg.AdmissionProbes {
				every = quick // admission: the next probe soon
			}
		}
		p.next[k] = now.Add(every - every/10 + p.cfg.Jitter(every/5+1))
		launched++
		p.launch(ctx, t, k, 0, min(p.cfg.Timeout, t.Interval))
	}
	clear(p.suspects)
	if same {
		return launched
	}
	for k := range p.next {
		if _, ok := live[k]; !ok {
			delete(p.next, k)
			delete(p.launched, k)
			delete(p.last, k)
			delete(p.suspicions, k)
			delete(p.failing, k)
			delete(p.answered, k)
		}
	}
	return launched
}

// suspicion is a suspect target's re-probing: the unanswered probes held until a re-probe
// answers (they were lost) or ConfirmLost of them in a row confirm the failure.
type suspicion struct {
	seq    uint64
	next   time.Time // the next re-probe is due
	sent   int       // re-probes launched
	budget int       // re-probes it may launch
	held   []Result  // unanswered probes, not reported yet
}

// reprobe launches s's next re-probe when it is due, a slot is free and its budget is not
// spent (enough re-probes to make ConfirmLost unanswered probes in a row); a suspicion whose budget
// is spent and whose re-probes have all answered ends, and the declared interval applies
// again. It reports whether it launched one. p.mu is held.
func (p *Prober) reprobe(ctx context.Context, t Target, k probeKey, s *suspicion, now time.Time) bool {
	if s.sent >= s.budget {
		if p.inFlight[k] == 0 {
			delete(p.suspicions, k)
			p.next[k] = now.Add(t.Interval - t.Interval/10 + p.cfg.Jitter(t.Interval/5+1))
		}
		return false
	}
	// due half a tick early: a tick that comes a hair before the instant would put every
	// re-probe a tick late, doubling the spacing
	if now.Add(p.cfg.Tick/2).Before(s.next) || p.inFlight[k] >= maxReprobesInFlight {
		return false
	}
	select {
	case p.slots <- struct{}{}:
	default:
		return false
	}
	s.sent++
	s.next = now.Add(p.cfg.ReprobeEvery)
	p.reprobes.Inc()
	p.launch(ctx, t, k, s.seq, min(max(p.cfg.ReprobeTimeout, 4*p.answered[k]), p.cfg.Timeout, t.Interval))
	return true
}

// launch sends one probe of t (a re-probe of suspicion seq, or 0) in its own goroutine, which
// the prober's WaitGroup owns. p.mu is held; a slot is taken.
func (p *Prober) launch(ctx context.Context, t Target, k probeKey, seq uint64, timeout time.Duration) {
	p.inFlight[k]++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res := p.probe(ctx, t, timeout)
		<-p.slots
		p.mu.Lock()
		p.inFlight[k]--
		if p.inFlight[k] <= 0 {
			delete(p.inFlight, k)
		}
		reports := p.judge(k, seq, res)
		prev, seen := p.last[k]
		if len(reports) > 0 {
			p.last[k] = reports[len(reports)-1].Result
		}
		p.mu.Unlock()
		if n := len(reports); n > 0 && seen && prev != reports[n-1].Result {
			p.cfg.Logger.Info("probe result changed", slog.String("instance_id", t.ID), slog.String("from", prev),
				slog.String("to", reports[n-1].Result), slog.String("detail", reports[n-1].Detail), slog.Int("results", n))
		}
		for _, r := range reports {
			p.cfg.Report(r)
		}
	}()
}

// judge decides what one probe's result reports (p.mu held): an ok ends the suspicion, and
// the unanswered probes it held were lost (an ok re-probe itself is not reported); an unanswered probe is held until ConfirmLost in a
// row confirm it (then all of them are reported), unless the target's failure was reported
// already; a failed answer or a refusal is reported at once, with what was held. A re-probe of
// a suspicion that has ended reports nothing.
func (p *Prober) judge(k probeKey, seq uint64, res Result) []Result {
	if !res.lost && res.Result != health.ProbeRefused {
		p.answered[k] = res.Latency
	}
	s := p.suspicions[k]
	if seq != 0 && (s == nil || s.seq != seq) {
		return nil
	}
	switch {
	case res.Result == health.ProbeOK:
		if s != nil {
			p.lost.Add(float64(len(s.held)))
			delete(p.suspicions, k)
		}
		delete(p.failing, k)
		if seq != 0 {
			// a re-probe confirms failures, it never counts as a passing probe: re-entry
			// goes at the declared interval, however many consumers made it suspect
			return nil
		}
		return []Result{res}
	case res.lost && !p.failing[k] && p.cfg.ConfirmLost > 1:
		// held: an ok re-probe says it was lost, ConfirmLost in a row that nothing answers
		if s == nil {
			s = p.suspect(k, p.cfg.ConfirmLost-1) // this probe is the first of them
		}
		s.held = append(s.held, res)
		if len(s.held) < p.cfg.ConfirmLost {
			return nil
		}
		p.failing[k] = true
		delete(p.suspicions, k)
		p.cfg.Logger.Info("probe failure confirmed: no answer to the probe nor its re-probes", slog.String("instance_id", k.id),
			slog.Int("unanswered", len(s.held)), slog.Time("first_unanswered_at", s.held[0].At), slog.Duration("confirmed_after", res.At.Sub(s.held[0].At)))
		return restamp(s.held, res.At)
	default: // a failed answer, a refusal, or an unanswered probe of a target known failing
		var out []Result
		if s != nil {
			out, s.held = restamp(s.held, res.At), nil
		}
		p.failing[k] = true
		if res.Result == health.ProbeRefused {
			delete(p.suspicions, k) // the fast path needs no re-probe: nothing listens
		} else if s == nil && res.Result == health.ProbeFail && !res.lost {
			p.suspect(k, max(p.cfg.ConfirmLost-1, 1)) // confirmed quickly by re-probes, each reported
		}
		return append(out, res)
	}
}

// restamp dates held results at, the instant they are reported: the registry applies evidence
// in time order (each keeps the instant it was observed in its detail).
func restamp(held []Result, at time.Time) []Result {
	for i := range held {
		if !held[i].At.Equal(at) {
			held[i].Detail = fmt.Sprintf("%s (unanswered at %s, confirmed by re-probes)", held[i].Detail, held[i].At.UTC().Format(time.RFC3339Nano))
			held[i].Observed, held[i].At = held[i].At, at
		}
	}
	return held
}

// suspect starts re-probing k at the next Step, budget re-probes at most.
func (p *Prober) suspect(k probeKey, budget int) *suspicion {
	p.suspicionSeq++
	s := &suspicion{seq: p.suspicionSeq, budget: budget}
	p.suspicions[k] = s
	return s
}

// Suspect asks for id to be re-probed early: a consumer reported connect failures to it. An
// instance whose failure is known already, or that is being re-probed, is left as it is.
func (p *Prober) Suspect(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suspects[id] = struct{}{}
}

// probe sends one GET and classifies the answer: 2xx is ok; another status fail; a refused
// or reset connection refused; no answer within the timeout timeout; anything else fail. A
// 2xx JSON answer that names an instance_id other than the target's is refused too: another
// process answers at the registered address (a zombie registration), so the instance is not
// there, as surely as when the port is closed.
func (p *Prober) probe(ctx context.Context, t Target, timeout time.Duration) Result {
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
		res.lost = res.Result == health.ProbeTimeout // no answer in time: maybe lost on the way
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
