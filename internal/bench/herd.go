package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
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
	shed    bool // answered 429
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := o.next.RoundTrip(req)
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, apiv1.PathRegister) {
		o.mu.Lock()
		o.regs = append(o.regs, regEvent{at: time.Now(), latency: time.Since(start), ok: err == nil && resp.StatusCode == http.StatusOK,
			shed: err == nil && resp.StatusCode == http.StatusTooManyRequests})
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

// RunHerd starts the agents, waits until all are registered, restarts the registry with
// empty state (or waits for the operator to restart an external one) and measures the
// re-registration wave until every agent is back or ctx ends.
func RunHerd(ctx context.Context, cfg HerdConfig) (*HerdReport, error) {
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
	if cfg.Providers < 1 || cfg.HeartbeatInterval < time.Second || cfg.LeaseTTL <= cfg.HeartbeatInterval {
		return nil, errors.New("herd: providers must be positive, the heartbeat interval at least 1s and under the lease TTL")
	}

	var inproc *restartableRegistry
	url := cfg.Registry
	if url == "" {
		var err error
		inproc, err = startRestartable(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer inproc.stop()
		url = "http://" + inproc.addr
	}

	obs := &observer{next: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256, IdleConnTimeout: time.Minute}}
	client := &http.Client{Transport: obs}
	agentsCtx, stopAgents := context.WithCancel(ctx)
	var wg sync.WaitGroup
	agents := make([]*provider.Agent, cfg.Providers)
	for i := range agents {
		a, err := provider.New(provider.Config{
			Registries: []string{url}, Client: client,
			Registration: apiv1.RegisterRequest{InstanceID: fmt.Sprintf("herd-%d", i), ServiceName: "herd", ServiceVersion: "1.0.0",
				Endpoint:     fmt.Sprintf("http://127.0.0.1:%d", 20000+i%40000),
				Capabilities: []apiv1.Capability{{CapabilityID: "herd.work", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "herd"}}},
		})
		if err != nil {
			stopAgents()
			return nil, err
		}
		agents[i] = a
		wg.Go(func() { a.Run(agentsCtx) })
	}
	defer func() { stopAgents(); wg.Wait() }()

	allRegistered := func(epoch string) bool {
		for _, a := range agents {
			st := a.Status()
			if !st.Registered || (epoch != "" && st.RegistryEpoch == epoch) {
				return false
			}
		}
		return true
	}
	if err := waitFor(ctx, func() bool { return allRegistered("") }); err != nil {
		return nil, fmt.Errorf("herd: the agents did not all register: %w", err)
	}
	cfg.Notify("%d providers registered", cfg.Providers)
	// Let the heartbeats of agents started together drift apart, as a real fleet's are.
	if err := deadline.Sleep(ctx, 2*cfg.HeartbeatInterval); err != nil {
		return nil, err
	}
	oldEpoch := agents[0].Status().RegistryEpoch
	var restartAt time.Time
	if inproc != nil {
		restartAt = time.Now()
		if err := inproc.restart(ctx, cfg); err != nil {
			return nil, err
		}
		cfg.Notify("registry restarted with empty state")
	} else {
		cfg.Notify("restart the registry at %s now; waiting for the providers to come back", url)
		restartAt = time.Now()
	}
	if err := waitFor(ctx, func() bool { return allRegistered(oldEpoch) }); err != nil {
		return nil, fmt.Errorf("herd: not every provider came back: %w", err)
	}
	return herdReport(cfg, obs.since(restartAt), restartAt), nil
}

func herdReport(cfg HerdConfig, evs []regEvent, restartAt time.Time) *HerdReport {
	rep := &HerdReport{Providers: cfg.Providers, HeartbeatInterval: cfg.HeartbeatInterval, Attempts: len(evs), ReconnectRate: max(cfg.ReconnectRate, 0)}
	perSecond := map[int64]int{}
	var lat []time.Duration
	var last time.Time
	for _, e := range evs {
		if !e.ok {
			rep.Failures++
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
	_, err := fmt.Fprintf(w, `providers                %d
heartbeat interval       %s
all back after           %s (%.2f heartbeat intervals)
peak registrations/s     %d (%.1f per 100 providers)
mean registrations/s     %.1f
registration latency     p50 %s, p99 %s
attempts (failed, shed)  %d (%d, %d)
reconnection cap         %s
`, r.Providers, r.HeartbeatInterval, round(r.AllBackAfter), r.AllBackIntervals, r.PeakPerSecond, r.PeakPer100,
		r.MeanPerSecond, round(r.LatencyP50), round(r.LatencyP99), r.Attempts, r.Failures, r.Shed, capString(r.ReconnectRate))
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
	t := time.NewTicker(5 * time.Millisecond)
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
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startRestartable(ctx context.Context, cfg HerdConfig) (*restartableRegistry, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("herd: listen: %w", err)
	}
	r := &restartableRegistry{addr: ln.Addr().String()}
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
func (r *restartableRegistry) restart(ctx context.Context, cfg HerdConfig) error {
	r.stop()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("herd: listen again on %s: %w", r.addr, err)
	}
	return r.serve(ctx, cfg, ln)
}

func (r *restartableRegistry) stop() {
	r.cancel()
	<-r.done
}
