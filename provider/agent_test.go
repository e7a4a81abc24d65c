package provider_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/provider"
)

func registration(id string) apiv1.RegisterRequest {
	return apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "0.1.3",
		Endpoint: "http://127.0.0.1:7410", Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish",
			CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
}

// restartable is a registry behind a fixed URL that can be restarted with empty state.
type restartable struct {
	*httptest.Server
	mu  sync.Mutex
	reg *registry.Registry
	h   http.Handler
}

func newRestartable(t *testing.T) *restartable {
	r := &restartable{}
	r.restart(t)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		h := r.h
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

// restart replaces the registry with a new, empty one (a new epoch).
func (r *restartable) restart(t *testing.T) {
	store := memstore.New(nil)
	reg, err := registry.New(store, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(reg, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.reg, r.h = reg, srv
	r.mu.Unlock()
}

func (r *restartable) registry() *registry.Registry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reg
}

// eventually polls cond until it holds, failing after 10 s. It asserts no timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func startAgent(t *testing.T, cfg provider.Config) (*provider.Agent, func() error) {
	t.Helper()
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Millisecond
	}
	if cfg.Backoff == (provider.Backoff{}) {
		cfg.Backoff = provider.Backoff{Initial: time.Millisecond, Multiplier: 2, Max: 10 * time.Millisecond}
	}
	if cfg.DrainTimeout == 0 {
		// These registries have just started, so they never confirm a withdrawal (a live
		// gateway may not have been heard from yet): the drain is not what these tests check.
		cfg.DrainTimeout = 100 * time.Millisecond
	}
	a, err := provider.New(cfg)
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { stop() })
	return a, stop
}

func registered(reg *registry.Registry, id string) func() bool {
	return func() bool { _, err := reg.Instance(id); return err == nil }
}

func TestRegisterHeartbeatDeregister(t *testing.T) {
	r := newRestartable(t)
	a, stop := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1")})
	eventually(t, "registered", registered(r.registry(), "jms-1"))
	before, _ := r.registry().Instance("jms-1")
	eventually(t, "a heartbeat moved the lease", func() bool {
		in, _ := r.registry().Instance("jms-1")
		return in.LeaseExpiresAt.After(before.LeaseExpiresAt)
	})
	if st := a.Status(); !st.Registered || st.Generation != before.Generation || st.Registrations != 1 {
		t.Errorf("Status() = %+v", st)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if registered(r.registry(), "jms-1")() {
		t.Error("still registered after the agent stopped")
	}
}

func TestRegistryRestartWithEmptyState(t *testing.T) {
	r := newRestartable(t)
	prom := prometheus.NewRegistry()
	agents := make([]*provider.Agent, 20)
	for i := range agents {
		var reg prometheus.Registerer
		if i == 0 {
			reg = prom
		}
		agents[i], _ = startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-" + string(rune('a'+i))), Registerer: reg})
	}
	for _, a := range agents {
		// the agent has its answer (the registry may store a record before its answer arrives)
		eventually(t, "registered", func() bool { return a.Status().Registered })
	}
	firstEpoch := agents[0].Status().RegistryEpoch
	r.restart(t)
	for _, a := range agents {
		eventually(t, "re-registered after the restart", func() bool { return a.Status().Registrations == 2 })
	}
	st := agents[0].Status()
	if st.RegistryEpoch == firstEpoch || st.Registrations != 2 {
		t.Errorf("after the restart: %+v, want a new epoch and 2 registrations", st)
	}
	eventually(t, "reason counted", func() bool {
		return testutil.ToFloat64(mustCounter(t, prom, "meshflows_provider_registry_reregister_total", "not_found")) == 1
	})
}

// mustCounter reads one labelled counter from a registry as a collector testutil can read.
func mustCounter(t *testing.T, g prometheus.Gatherer, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() == label {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
}

func TestEpochChangeWithoutNotFound(t *testing.T) {
	r := newRestartable(t)
	a, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1")})
	eventually(t, "registered", func() bool { return a.Status().Registered })
	old := a.Status()
	// a registry that knows the instance at its generation, under another epoch
	r.restart(t)
	rec := registry.RecordFromInstance(apiv1.Instance{InstanceID: "jms-1", ServiceName: "egress-jms", ServiceVersion: "0.1.3",
		Endpoint: "http://127.0.0.1:7410", Generation: old.Generation, Health: "ok",
		Capabilities: registration("jms-1").Capabilities}, time.Now().Add(time.Hour))
	if err := r.registry().Store().Restore(context.Background(), registry.Epoch{ID: "another-epoch", Start: time.Now()}, 5, old.Generation, []*registry.Record{rec}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-registered under the new epoch", func() bool { return a.Status().RegistryEpoch == "another-epoch" && a.Status().Registrations == 2 })
}

func TestGenerationMismatchReRegisters(t *testing.T) {
	r := newRestartable(t)
	a, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1")})
	eventually(t, "registered", func() bool { return a.Status().Registered })
	first := a.Status().Generation
	// someone else registers the same instance id: the agent's heartbeat gets 410
	req := registration("jms-1")
	if _, err := r.registry().Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-registered after 410", func() bool { return a.Status().Registrations == 2 })
	in, _ := r.registry().Instance("jms-1")
	if in.Generation <= first+1 || in.Generation != a.Status().Generation {
		t.Errorf("registry generation %d, agent %d, first %d", in.Generation, a.Status().Generation, first)
	}
}

func TestLateDeregisterIsFenced(t *testing.T) {
	r := newRestartable(t)
	old, stopOld := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1"),
		HeartbeatInterval: time.Hour})
	eventually(t, "old registered", func() bool { return old.Status().Registered })
	// the replacement incarnation registers while the old process is still shutting down
	repl, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1")})
	eventually(t, "replacement registered", func() bool { return repl.Status().Generation > old.Status().Generation })
	if err := stopOld(); err != nil {
		t.Fatal(err)
	}
	in, err := r.registry().Instance("jms-1")
	if err != nil || in.Generation != repl.Status().Generation {
		t.Fatalf("the late deregister removed the replacement: %+v, %v", in, err)
	}
}

func TestHeartbeatFailuresReRegister(t *testing.T) {
	r := newRestartable(t)
	var failHeartbeats atomic.Bool
	var registrations atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPut && failHeartbeats.Load() {
			provider.WriteError(w, apiv1.Errorf(500, apiv1.CodeInternal, "boom"))
			return
		}
		if req.Method == http.MethodPost {
			registrations.Add(1)
		}
		r.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close) // after the agent's stop (cleanups run last first): it deregisters
	prom := prometheus.NewRegistry()
	startAgent(t, provider.Config{Registries: []string{front.URL}, Registration: registration("jms-1"), Registerer: prom})
	eventually(t, "registered", func() bool { return registrations.Load() == 1 })
	failHeartbeats.Store(true)
	eventually(t, "registered again after 3 failures", func() bool { return registrations.Load() == 2 })
	if got := testutil.ToFloat64(mustCounter(t, prom, "meshflows_provider_registry_heartbeat_failures_total", "")); got < 3 {
		t.Errorf("heartbeat_failures_total = %v, want >= 3", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, prom, "meshflows_provider_registry_reregister_total", "heartbeat_failures")); got < 1 {
		t.Errorf("reregister_total{reason=heartbeat_failures} = %v, want >= 1", got)
	}
}

func TestFailoverToTheNextRegistry(t *testing.T) {
	// Port 1 refuses, as everywhere in the tests (a closed test server's port can be taken
	// again by a parallel test's listener).
	const dead = "http://127.0.0.1:1"
	r := newRestartable(t)
	a, _ := startAgent(t, provider.Config{Registries: []string{dead, r.URL}, Registration: registration("jms-1")})
	eventually(t, "registered with the second registry", registered(r.registry(), "jms-1"))
	if got := a.Status().Registry; got != r.URL {
		t.Errorf("Status().Registry = %s, want %s", got, r.URL)
	}
}

// TestDeregistrationFailsOver: the registry the agent used goes away just before it stops;
// the deregistration goes to the next one instead of being lost (gateways would route to the
// stopped provider until its lease ended).
func TestDeregistrationFailsOver(t *testing.T) {
	r := newRestartable(t)
	var down atomic.Bool
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if down.Load() {
			provider.WriteError(w, apiv1.Errorf(503, apiv1.CodeUnavailable, "going away"))
			return
		}
		r.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(first.Close)
	a, stop := startAgent(t, provider.Config{Registries: []string{first.URL, r.URL}, Registration: registration("jms-1"), HeartbeatInterval: time.Hour})
	eventually(t, "registered, as the agent knows", func() bool { return a.Status().Registered })
	down.Store(true)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.registry().Instance("jms-1"); err == nil {
		t.Fatal("jms-1 is still registered: the deregistration was lost when its registry went away")
	}
}

func TestUpdateCapabilities(t *testing.T) {
	r := newRestartable(t)
	a, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1"), HeartbeatInterval: time.Hour})
	eventually(t, "registered", registered(r.registry(), "jms-1"))
	caps := append(registration("jms-1").Capabilities, apiv1.Capability{CapabilityID: "messaging.publish",
		CapabilityVersion: "2.0.0", ContractSchemaVersion: "2.0", Provider: "jms"})
	if err := a.UpdateCapabilities(caps); err != nil {
		t.Fatal(err)
	}
	eventually(t, "registered with two capabilities", func() bool {
		in, err := r.registry().Instance("jms-1")
		return err == nil && len(in.Capabilities) == 2
	})
	if err := a.UpdateCapabilities([]apiv1.Capability{{CapabilityID: "bad"}}); err == nil {
		t.Error("UpdateCapabilities accepted an invalid capability")
	}
}

func TestInvalidRegistrationStopsRun(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		provider.WriteError(w, apiv1.InvalidRequest([]apiv1.Detail{{Path: "manifest", Message: "no"}}))
	}))
	defer bad.Close()
	a, err := provider.New(provider.Config{Registries: []string{bad.URL}, Registration: registration("jms-1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); !errors.Is(err, provider.ErrInvalidRegistration) {
		t.Errorf("Run = %v, want ErrInvalidRegistration", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := map[string]provider.Config{
		"no registry":      {Registration: registration("a")},
		"bad registry URL": {Registries: []string{"registry:7400"}, Registration: registration("a")},
		"bad registration": {Registries: []string{"http://r"}, Registration: apiv1.RegisterRequest{InstanceID: "a"}},
		"bad backoff":      {Registries: []string{"http://r"}, Registration: registration("a"), Backoff: provider.Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}},
	}
	for name, cfg := range tests {
		if _, err := provider.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// fakeClock never sleeps: After fires at once and moves the clock by the wait asked for.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

func TestFiveMinuteOutageCompressed(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	upAt := clock.now.Add(5 * time.Minute)
	r := newRestartable(t)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if clock.Now().Before(upAt) {
			provider.WriteError(w, apiv1.Errorf(503, apiv1.CodeUnavailable, "down"))
			return
		}
		r.Config.Handler.ServeHTTP(w, req)
	}))
	defer front.Close()
	a, err := provider.New(provider.Config{Registries: []string{front.URL}, Registration: registration("jms-1"),
		Clock: clock, Rand: func() float64 { return 0.5 }, HeartbeatInterval: time.Hour, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	eventually(t, "registered after the outage", func() bool { return a.Status().Registered })
	if in, err := r.registry().Instance("jms-1"); err != nil || in.Generation != 1 {
		t.Errorf("after the outage: %+v, %v", in, err)
	}
	cancel()
	<-done
	waits := clock.recorded()
	var total time.Duration
	var backoffs []time.Duration
	for _, w := range waits {
		if w == time.Hour*8/10+time.Hour*2/10/2 { // the heartbeat wait after registering
			break
		}
		backoffs = append(backoffs, w)
		total += w
	}
	// 100ms, 200ms, … doubling, capped at 5 min, each plus 50 ms of jitter (Rand = 0.5)
	for i, w := range backoffs {
		exp := provider.DefaultBackoff().Delay(i, func() float64 { return 0.5 })
		if w != exp {
			t.Errorf("wait %d = %v, want %v", i, w, exp)
		}
		if w > 5*time.Minute+100*time.Millisecond {
			t.Errorf("wait %d = %v is over the cap", i, w)
		}
	}
	if total < 5*time.Minute || len(backoffs) < 10 {
		t.Errorf("%d retries over %v, want them to span the 5-minute outage", len(backoffs), total)
	}
}

// TestRejoiningRetriesEveryInterval: an agent that was registered and lost the registry for
// 15 minutes retries at least once a heartbeat interval (never at the backoff's 5-minute
// cap), so it is back within one interval of the registry's return — inside the lease TTL a
// restarted registry waits for its fleet.
func TestRejoiningRetriesEveryInterval(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	downAt, upAt := clock.now.Add(30*time.Second), clock.now.Add(15*time.Minute+30*time.Second)
	r := newRestartable(t)
	var mu sync.Mutex
	var back time.Time // when the first registration after the outage arrived
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := clock.Now()
		if !now.Before(downAt) && now.Before(upAt) {
			provider.WriteError(w, apiv1.Errorf(503, apiv1.CodeUnavailable, "down"))
			return
		}
		mu.Lock()
		if !now.Before(upAt) && back.IsZero() && req.Method == http.MethodPost {
			back = now
		}
		mu.Unlock()
		r.Config.Handler.ServeHTTP(w, req)
	}))
	defer front.Close()
	const interval = 10 * time.Second
	a, err := provider.New(provider.Config{Registries: []string{front.URL}, Registration: registration("jms-1"),
		Clock: clock, Rand: func() float64 { return 0.5 }, HeartbeatInterval: interval, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	eventually(t, "registered again after the outage", func() bool {
		in, err := r.registry().Instance("jms-1")
		return err == nil && in.Generation >= 2
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if late := back.Sub(upAt); late > interval {
		t.Errorf("registered again %v after the registry came back, want within the %v interval", late, interval)
	}
	for i, w := range clock.recorded() {
		if w > interval {
			t.Errorf("wait %d = %v: over the heartbeat interval while rejoining", i, w)
		}
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var calls atomic.Int64
	r := newRestartable(t)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// only registrations count: the previous agent's deregistration may still arrive
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, apiv1.PathRegister) && calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "7")
			provider.WriteError(w, apiv1.Errorf(429, apiv1.CodeRateLimited, "slow down"))
			return
		}
		r.Config.Handler.ServeHTTP(w, req)
	}))
	defer front.Close()
	for _, tt := range []struct {
		rand float64
		want time.Duration
	}{{0, 7 * time.Second}, {0.5, 10500 * time.Millisecond}, {0.999, 13993 * time.Millisecond}} {
		calls.Store(0)
		clock := &fakeClock{now: clock.now}
		a, _ := provider.New(provider.Config{Registries: []string{front.URL}, Registration: registration("jms-1"), Clock: clock, HeartbeatInterval: time.Hour,
			DrainTimeout: 100 * time.Millisecond, Rand: func() float64 { return tt.rand }})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		eventually(t, "registered", func() bool { return a.Status().Registered })
		cancel()
		<-done
		// Retry-After and up to as much again: a herd shed together comes back spread
		if w := clock.recorded()[0]; w != tt.want {
			t.Errorf("rand %v: the first retry waited %v, want %v (the 7 s of Retry-After, jittered up to as much again)", tt.rand, w, tt.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := provider.DefaultBackoff()
	tests := []struct {
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{0, 0, 100 * time.Millisecond},
		{1, 0, 200 * time.Millisecond},
		{5, 0, 3200 * time.Millisecond},
		{0, 0.999, 100*time.Millisecond + 99900*time.Microsecond},
		{11, 0, 204800 * time.Millisecond},
		{12, 0, 5 * time.Minute},
		{1000, 0.5, 5*time.Minute + 50*time.Millisecond},
	}
	for _, tt := range tests {
		if got := b.Delay(tt.attempt, func() float64 { return tt.rnd }); got != tt.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tt.attempt, tt.rnd, got, tt.want)
		}
	}
}

// TestDrainAsksAFewTimesASecond: a stopping provider whose withdrawal no gateway confirms
// waits at least a quarter second between its asks (it waited 50 ms: twenty asks a second,
// each a line of the registry's audit log). The clock is fake: every wait is recorded, none
// is slept.
func TestDrainAsksAFewTimesASecond(t *testing.T) {
	r := newRestartable(t)
	var asks atomic.Int64
	h := r.h
	r.mu.Lock()
	r.h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/withdrawal") {
			asks.Add(1)
		}
		h.ServeHTTP(w, req)
	})
	r.mu.Unlock()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, stop := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1"),
		Clock: clock, HeartbeatInterval: time.Hour, DrainTimeout: 200 * time.Millisecond})
	eventually(t, "registered", registered(r.registry(), "jms-1"))
	before := len(clock.recorded())
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waits := clock.recorded()[before:]
	if asks.Load() < 2 || len(waits) == 0 {
		t.Fatalf("%d withdrawal asks, %d waits: the drain did not poll", asks.Load(), len(waits))
	}
	for _, d := range waits {
		if d < 250*time.Millisecond {
			t.Errorf("a wait of %s between withdrawal asks (of %d waits), want at least 250 ms", d, len(waits))
			break
		}
	}
}

// TestPublishWhenReady: with PublishWhenReady the agent registers the instance not_ready and
// heartbeats not_ready until the application calls Ready, which heartbeats ok at once (the
// interval here is an hour); an agent ready before it registers registers ok; without
// PublishWhenReady it is ready from the start.
func TestPublishWhenReady(t *testing.T) {
	r := newRestartable(t)
	a, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-1"), PublishWhenReady: true, HeartbeatInterval: time.Hour})
	eventually(t, "registered", func() bool { return a.Status().Registered })
	health := func() string { in, _ := r.registry().Instance("jms-1"); return in.Health }
	if h, st := health(), a.Status(); h != apiv1.HealthNotReady || st.Ready || st.Health != apiv1.HealthNotReady {
		t.Fatalf("before Ready: registered %q, status %+v; want not_ready", h, st)
	}
	a.Ready()
	eventually(t, "Ready heartbeats ok at once", func() bool { return health() == apiv1.HealthOK })
	if st := a.Status(); !st.Ready || st.Health != apiv1.HealthOK {
		t.Errorf("after Ready: %+v", st)
	}
	// ready before its registration (or before a re-registration): it registers ok
	b, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-2"), PublishWhenReady: true, HeartbeatInterval: time.Hour})
	b.Ready()
	eventually(t, "registered", func() bool { return b.Status().Registered })
	eventually(t, "ok", func() bool { in, _ := r.registry().Instance("jms-2"); return in.Health == apiv1.HealthOK })
	c, _ := startAgent(t, provider.Config{Registries: []string{r.URL}, Registration: registration("jms-3"), HeartbeatInterval: time.Hour})
	eventually(t, "registered", func() bool { return c.Status().Registered })
	if in, _ := r.registry().Instance("jms-3"); in.Health != apiv1.HealthOK || !c.Status().Ready {
		t.Errorf("without PublishWhenReady: registered %q, status %+v; want ok and ready from the start", in.Health, c.Status())
	}
}
