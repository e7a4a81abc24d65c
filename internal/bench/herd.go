package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/deadline"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/provider"
)

// HerdConfig configures a thundering-herd run: N provider agents, a registry restart with
// empty state, and the re-registration wave that follows.
type HerdConfig struct {
	// Providers is the number of SDK agents started in this process (default 1,000).
	Providers int
	// Registry is the URL of an external registry. Empty (the default) runs a registry in
	// this process on Listen and restarts it with empty state itself; with an external one,
	// the operator restarts it when told to.
	Registry string
	// Listen is the address of the in-process registry (default 127.0.0.1:0).
	Listen string
	// HeartbeatInterval and LeaseTTL of the in-process registry (default 5 s and 15 s).
	HeartbeatInterval time.Duration
	LeaseTTL          time.Duration
	// ReconnectRate and ReconnectBurst are the in-process registry's reconnection cap
	// (--reconnect-rate): registrations a second past which it sheds with 429 and a
	// Retry-After. Zero or less: none.
	ReconnectRate  float64
	ReconnectBurst int
	// RegistryCommand, when set, runs the registry in a child process (its argv, to which
	// the bench adds --listen, --heartbeat-interval, --lease-ttl and the cap): its CPU is
	// then its own, apart from the agents', and a restart kills it and starts it again.
	// Empty: the registry runs in this process (unless Registry is set).
	RegistryCommand []string
	// Watchers keep a delta watch each on a few canary instances through the wave
	// (default 0: none); Canaries is how many (default 20 when there are watchers). While
	// the wave lasts the bench withdraws a canary every WithdrawEvery (default 500 ms) and
	// times until no watcher holds it.
	Watchers      int
	Canaries      int
	WithdrawEvery time.Duration
	// MaxConns bounds the agents' connections to the registry (default 4,096: the loopback
	// has some 28,000 ephemeral ports and a process a limit of open files, far below one
	// connection per agent at 50,000).
	MaxConns int
	// StartRate is how many agents are started a second before the restart (default 5,000):
	// 50,000 agents started in one instant would queue for the shared connections past their
	// request timeouts and register again and again — the bench's own herd, not the one
	// measured. The wave after the restart is the agents' own timing.
	StartRate int
	// Notify receives progress lines for the operator (default: none).
	Notify func(format string, args ...any)
}

// HerdReport is the outcome of RunHerd.
type HerdReport struct {
	Providers         int           `json:"providers"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	// AllBackAfter is the time from the restart to the last re-registration.
	AllBackAfter time.Duration `json:"all_back_after_ns"`
	// AllBackIntervals is AllBackAfter in heartbeat intervals.
	AllBackIntervals float64 `json:"all_back_intervals"`
	// PeakPerSecond is the most successful registrations in one second; MeanPerSecond the
	// re-registrations over the whole wave.
	PeakPerSecond int     `json:"peak_per_second"`
	MeanPerSecond float64 `json:"mean_per_second"`
	// PeakPer100 is PeakPerSecond per 100 providers.
	PeakPer100 float64 `json:"peak_per_second_per_100_providers"`
	// Latency of the re-registration requests.
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`
	Attempts   int           `json:"attempts"`
	Failures   int           `json:"failed_attempts"`
	// ReconnectRate is the in-process registry's cap (0: none); Shed the attempts it
	// answered 429.
	ReconnectRate float64 `json:"reconnect_rate"`
	Shed          int     `json:"shed_attempts"`
	// FailedBy counts the failed attempts by what the agent got (a status, or the kind of
	// transport error).
	FailedBy map[string]int `json:"failed_by,omitempty"`
	// NotBack is how many agents were not registered again when the run ended (0 when every
	// one came back).
	NotBack int `json:"not_back"`
	// CPU is the registry's CPU, percent of one core, a second at a time from the restart
	// (the whole process's, agents included, when the registry runs in this process:
	// CPUOwn false); PeakCPU its highest second, PinnedSeconds the longest run of seconds
	// at 90% of every core of the machine or more.
	CPU           []CPUSecond `json:"cpu,omitempty"`
	CPUOwn        bool        `json:"cpu_own_process"`
	PeakCPU       float64     `json:"peak_cpu_percent"`
	PinnedSeconds float64     `json:"pinned_seconds"`
	// Watchers, and the withdrawals timed during the wave: from the deregistration sent to
	// no watcher holding the canary.
	Watchers          int           `json:"watchers"`
	Withdrawals       int           `json:"withdrawals"`
	WithdrawalsMissed int           `json:"withdrawals_missed"`
	WithdrawalP50     time.Duration `json:"withdrawal_p50_ns"`
	WithdrawalP99     time.Duration `json:"withdrawal_p99_ns"`
	WithdrawalMax     time.Duration `json:"withdrawal_max_ns"`
}

// CPUSecond is the registry's CPU over about a second (a sample a second, longer when the
// sampler ran late) ending At seconds after the restart, in percent of one core.
type CPUSecond struct {
	At      float64 `json:"at_s"`
	Percent float64 `json:"percent"`
}

// observer is an http.RoundTripper that records every registration the agents send.
type observer struct {
	next http.RoundTripper
	mu   sync.Mutex
	regs []regEvent
}

type regEvent struct {
	at      time.Time // when the answer arrived
	latency time.Duration
	ok      bool
	shed    bool   // answered 429
	failure string // what a failed attempt got
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := o.next.RoundTrip(req)
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, apiv1.PathRegister) {
		o.mu.Lock()
		e := regEvent{at: time.Now(), latency: time.Since(start), ok: err == nil && resp.StatusCode == http.StatusOK,
			shed: err == nil && resp.StatusCode == http.StatusTooManyRequests}
		switch {
		case err != nil:
			e.failure = transportFailure(err)
		case !e.ok:
			e.failure = strconv.Itoa(resp.StatusCode)
		}
		o.regs = append(o.regs, e)
		o.mu.Unlock()
	}
	return resp, err
}

func (o *observer) since(t time.Time) []regEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []regEvent
	for _, e := range o.regs {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// RunHerd starts the agents (and the watchers), waits until all are registered, restarts
// the registry with empty state (or waits for the operator to restart an external one) and
// measures the re-registration wave until every agent is back or ctx ends: then the report
// says how many were not.
func RunHerd(ctx context.Context, cfg HerdConfig) (*HerdReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var reg herdRegistry
	switch {
	case cfg.Registry != "":
		reg = externalRegistry{u: cfg.Registry, notify: cfg.Notify}
	case len(cfg.RegistryCommand) > 0:
		sr, err := startSpawned(ctx, cfg)
		if err != nil {
			return nil, err
		}
		reg = sr
	default:
		inproc, err := startRestartable(ctx, cfg)
		if err != nil {
			return nil, err
		}
		reg = inproc
	}
	defer reg.stop()
	url := reg.url()

	obs := &observer{next: &http.Transport{MaxConnsPerHost: cfg.MaxConns, MaxIdleConnsPerHost: cfg.MaxConns, MaxIdleConns: cfg.MaxConns, IdleConnTimeout: time.Minute}}
	hc := &http.Client{Transport: obs}
	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopAgents(); wg.Wait() }()
	agents := make([]*provider.Agent, cfg.Providers)
	canaries := map[string]*provider.Agent{}
	for i := range cfg.Providers + cfg.Canaries {
		req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("herd-%d", i), ServiceName: "herd", ServiceVersion: "1.0.0",
			Endpoint:     fmt.Sprintf("http://127.0.0.1:%d", 20000+i%40000),
			Capabilities: []apiv1.Capability{{CapabilityID: "herd.work", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "herd"}}}
		if i >= cfg.Providers {
			req = canaryRegistration(i - cfg.Providers)
		}
		a, err := provider.New(provider.Config{Registries: []string{url}, Client: hc, Registration: req})
		if err != nil {
			return nil, err
		}
		if i < cfg.Providers {
			agents[i] = a
		} else {
			canaries[req.InstanceID] = a
		}
		wg.Go(func() { a.Run(agentsCtx) })
		if i%cfg.StartRate == cfg.StartRate-1 { // a fleet is not started in one instant
			if err := deadline.Sleep(ctx, time.Second); err != nil {
				return nil, err
			}
		}
	}
	panel := newWatchPanel(cfg.Watchers)
	if err := panel.run(agentsCtx, &wg, url); err != nil {
		return nil, err
	}
	cpu := &cpuSampler{}
	wg.Go(func() { cpu.run(agentsCtx, reg.pid) })

	// notBack counts the agents not registered (other than with epoch), asking only those not
	// seen back at the last count: at 50,000 agents a walk of them all every few milliseconds
	// would be the busiest thing in this process.
	var pending []*provider.Agent
	notBack := func(epoch string) int {
		kept := pending[:0]
		for _, a := range pending {
			if st := a.Status(); !st.Registered || (epoch != "" && st.RegistryEpoch == epoch) {
				kept = append(kept, a)
			}
		}
		pending = kept
		return len(pending)
	}
	pending = slices.Clone(agents)
	if err := waitFor(ctx, func() bool { return notBack("") == 0 }); err != nil {
		return nil, fmt.Errorf("herd: the agents did not all register: %w", err)
	}
	if err := waitFor(ctx, func() bool { return cfg.Watchers == 0 || len(panel.heldByAll()) == cfg.Canaries }); err != nil {
		return nil, fmt.Errorf("herd: the watchers did not all see the canaries: %w", err)
	}
	cfg.Notify("%d providers registered, %d watchers hold %d canaries", cfg.Providers, cfg.Watchers, cfg.Canaries)
	// Let the heartbeats of agents started together drift apart, as a real fleet's are.
	if err := deadline.Sleep(ctx, 2*cfg.HeartbeatInterval); err != nil {
		return nil, err
	}
	oldEpoch := agents[0].Status().RegistryEpoch
	restartAt := time.Now()
	cpuFrom := cpu.count()
	if err := reg.restart(ctx); err != nil {
		return nil, err
	}
	cfg.Notify("registry restarted with empty state")
	waveCtx, endWave := context.WithCancel(ctx)
	var times []time.Duration
	var missed int
	var ww sync.WaitGroup
	if cfg.Watchers > 0 {
		wc, err := client.New(client.Config{Registries: []string{url}, HTTPClient: &http.Client{}})
		if err != nil {
			endWave()
			return nil, err
		}
		ww.Go(func() { times, missed = withdrawals(waveCtx, panel, canaries, wc, cfg.WithdrawEvery, 30*time.Second) })
	}
	pending = slices.Clone(agents)
	waitErr := waitFor(ctx, func() bool { return notBack(oldEpoch) == 0 })
	endWave()
	ww.Wait()
	rep := herdReport(cfg, obs.since(restartAt), restartAt)
	rep.NotBack = notBack(oldEpoch)
	if waitErr != nil && rep.NotBack == 0 {
		return nil, waitErr
	}
	samples := cpu.since(cpuFrom)
	rep.CPUOwn = len(cfg.RegistryCommand) > 0
	for _, c := range samples {
		rep.CPU = append(rep.CPU, CPUSecond{At: c.end.Sub(restartAt).Seconds(), Percent: c.percent})
		rep.PeakCPU = max(rep.PeakCPU, c.percent)
	}
	rep.PinnedSeconds = longestPinned(samples)
	rep.Watchers, rep.Withdrawals, rep.WithdrawalsMissed = cfg.Watchers, len(times), missed
	if n := len(times); n > 0 {
		slices.Sort(times)
		rep.WithdrawalP50, rep.WithdrawalP99, rep.WithdrawalMax = times[percentileIndex(n, 0.5)], times[percentileIndex(n, 0.99)], times[n-1]
	}
	return rep, nil
}

func (cfg *HerdConfig) setDefaults() error {
	if cfg.Providers == 0 {
		cfg.Providers = 1000
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * cfg.HeartbeatInterval
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Notify == nil {
		cfg.Notify = func(string, ...any) {}
	}
	if cfg.Watchers > 0 && cfg.Canaries == 0 {
		cfg.Canaries = 20
	}
	if cfg.WithdrawEvery == 0 {
		cfg.WithdrawEvery = 500 * time.Millisecond
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4096
	}
	if cfg.StartRate == 0 {
		cfg.StartRate = 5000
	}
	if cfg.Providers < 1 || cfg.HeartbeatInterval < time.Second || cfg.LeaseTTL <= cfg.HeartbeatInterval {
		return errors.New("herd: providers must be positive, the heartbeat interval at least 1s and under the lease TTL")
	}
	if cfg.Watchers < 0 || cfg.Canaries < 0 || cfg.MaxConns < 1 || cfg.StartRate < 1 || cfg.WithdrawEvery < 10*time.Millisecond {
		return errors.New("herd: watchers and canaries must not be negative, max conns positive, withdrawals at least 10ms apart")
	}
	return nil
}

// transportFailure names the kind of a transport error, for counting.
func transportFailure(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case errors.Is(err, syscall.EMFILE):
		return "too_many_open_files"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no_local_port"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "transport"
}

func herdReport(cfg HerdConfig, evs []regEvent, restartAt time.Time) *HerdReport {
	rep := &HerdReport{Providers: cfg.Providers, HeartbeatInterval: cfg.HeartbeatInterval, Attempts: len(evs), ReconnectRate: max(cfg.ReconnectRate, 0)}
	perSecond := map[int64]int{}
	var lat []time.Duration
	var last time.Time
	for _, e := range evs {
		if !e.ok {
			rep.Failures++
			if rep.FailedBy == nil {
				rep.FailedBy = map[string]int{}
			}
			rep.FailedBy[e.failure]++
			if e.shed {
				rep.Shed++
			}
			continue
		}
		perSecond[int64(e.at.Sub(restartAt)/time.Second)]++
		lat = append(lat, e.latency)
		if e.at.After(last) {
			last = e.at
		}
	}
	for _, n := range perSecond {
		rep.PeakPerSecond = max(rep.PeakPerSecond, n)
	}
	rep.PeakPer100 = float64(rep.PeakPerSecond) * 100 / float64(cfg.Providers)
	if !last.IsZero() {
		rep.AllBackAfter = last.Sub(restartAt)
		rep.AllBackIntervals = rep.AllBackAfter.Seconds() / cfg.HeartbeatInterval.Seconds()
		rep.MeanPerSecond = float64(len(lat)) / rep.AllBackAfter.Seconds()
	}
	if n := len(lat); n > 0 {
		slices.Sort(lat)
		rep.LatencyP50, rep.LatencyP99 = lat[percentileIndex(n, 0.5)], lat[percentileIndex(n, 0.99)]
	}
	return rep
}

// WriteHerd prints a herd report for people.
func WriteHerd(w io.Writer, r *HerdReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, `providers                %d
heartbeat interval       %s
all back after           %s (%.2f heartbeat intervals)
not back                 %d
peak registrations/s     %d (%.1f per 100 providers)
mean registrations/s     %.1f
registration latency     p50 %s, p99 %s
attempts (failed, shed)  %d (%d, %d)
reconnection cap         %s
`, r.Providers, r.HeartbeatInterval, round(r.AllBackAfter), r.AllBackIntervals, r.NotBack, r.PeakPerSecond, r.PeakPer100,
		r.MeanPerSecond, round(r.LatencyP50), round(r.LatencyP99), r.Attempts, r.Failures, r.Shed, capString(r.ReconnectRate))
	if len(r.FailedBy) > 0 {
		keys := slices.Sorted(maps.Keys(r.FailedBy))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, r.FailedBy[k])
		}
		fmt.Fprintf(&b, "failed attempts by kind  %s\n", strings.Join(parts, ", "))
	}
	if r.Watchers > 0 {
		fmt.Fprintf(&b, "watchers                 %d\nwithdrawals in the wave  %d timed, %d missed: p50 %s, p99 %s, max %s\n",
			r.Watchers, r.Withdrawals, r.WithdrawalsMissed, round(r.WithdrawalP50), round(r.WithdrawalP99), round(r.WithdrawalMax))
	}
	if len(r.CPU) > 0 {
		whose := "the registry's own process"
		if !r.CPUOwn {
			whose = "this process: registry and agents"
		}
		fmt.Fprintf(&b, "registry CPU             peak %.0f%% of a core, pinned %.0f s in a row (%s)\nCPU a second at a time (%% of a core, seconds after the restart):\n", r.PeakCPU, r.PinnedSeconds, whose)
		for _, c := range r.CPU {
			fmt.Fprintf(&b, "  %5.1f s  %4.0f%%  %s\n", c.At, c.Percent, strings.Repeat("#", int(max(c.Percent, 0)/10)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// capString says a reconnection cap.
func capString(rate float64) string {
	if rate <= 0 {
		return "none"
	}
	return fmt.Sprintf("%g registrations/s", rate)
}

func waitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// restartableRegistry is a registry in this process whose state can be thrown away.
type restartableRegistry struct {
	cfg    HerdConfig
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startRestartable(ctx context.Context, cfg HerdConfig) (*restartableRegistry, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("herd: listen: %w", err)
	}
	r := &restartableRegistry{cfg: cfg, addr: ln.Addr().String()}
	if err := r.serve(ctx, cfg, ln); err != nil {
		ln.Close()
		return nil, err
	}
	return r, nil
}

func (r *restartableRegistry) serve(ctx context.Context, cfg HerdConfig, ln net.Listener) error {
	reg, err := registry.New(memstore.New(nil), registry.Config{LeaseTTL: cfg.LeaseTTL, HeartbeatInterval: cfg.HeartbeatInterval,
		ReconnectRate: cfg.ReconnectRate, ReconnectBurst: cfg.ReconnectBurst})
	if err != nil {
		return err
	}
	srv, err := server.New(reg, server.Config{ShutdownTimeout: time.Second})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { reg.Run(sctx) }) // the sweeper stops with sctx
		err := srv.Serve(sctx, ln)
		wg.Wait()
		r.done <- err
	}()
	return nil
}

// restart stops the registry and starts an empty one on the same address.
func (r *restartableRegistry) restart(ctx context.Context) error {
	cfg := r.cfg
	r.stop()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("herd: listen again on %s: %w", r.addr, err)
	}
	return r.serve(ctx, cfg, ln)
}

func (r *restartableRegistry) url() string { return "http://" + r.addr }
func (r *restartableRegistry) pid() int    { return os.Getpid() }

func (r *restartableRegistry) stop() {
	r.cancel()
	<-r.done
}
