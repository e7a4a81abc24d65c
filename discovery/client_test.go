package discovery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// clock is a fake clock for the client.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func newClient(t *testing.T, url string, cfg discovery.Config) (*discovery.Client, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Registries = []string{url}
	cfg.Now = clk.Now
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	c, err := discovery.New(cfg)
	if err != nil {
		t.Fatalf("discovery.New: %v", err)
	}
	return c, clk
}

// counting wraps a handler and counts the discovery requests it sees.
type counting struct {
	h    atomic.Pointer[http.Handler]
	hits atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		c.hits.Add(1)
	}
	(*c.h.Load()).ServeHTTP(w, r)
}

func (c *counting) set(h http.Handler) { c.h.Store(&h) }

// newFront puts a counting, switchable front in front of h.
func newFront(t *testing.T, h http.Handler) (*counting, *httptest.Server) {
	front := &counting{}
	front.set(h)
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	return front, srv
}

var down = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusServiceUnavailable)
})

func registerOne(t *testing.T, reg *registry.Registry, id string) {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "0.1.3", Endpoint: "http://" + id + ":8080",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	if _, err := reg.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
}

func ids(es []apiv1.CapabilityEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.InstanceID)
	}
	sort.Strings(out)
	return out
}

var publish = discovery.Query{CapabilityID: "messaging.publish"}

func TestFreshCacheAndAuthoritativeEmpty(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	s.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: answers are complete
	c, clk := newClient(t, s.URL, discovery.Config{})
	ctx := context.Background()

	res, err := c.Capabilities(ctx, publish)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != discovery.SourceFresh || res.State != discovery.StateAuthoritativeEmpty || res.Entries == nil || len(res.Entries) != 0 {
		t.Errorf("empty registry: %+v", res)
	}
	registerOne(t, s.Registry, "jms-1")
	res, _ = c.Capabilities(ctx, publish)
	if res.Source != discovery.SourceCache || len(res.Entries) != 0 {
		t.Errorf("within the TTL: %+v, want the cached empty view", res.Meta)
	}
	clk.Advance(discovery.DefaultTTL)
	res, _ = c.Capabilities(ctx, publish)
	if res.Source != discovery.SourceFresh || res.State != discovery.StateFresh || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "" {
		t.Errorf("after the TTL: %+v %v", res.Meta, ids(res.Entries))
	}
}

func TestNeverAnsweredIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(down)
	defer srv.Close()
	c, _ := newClient(t, srv.URL, discovery.Config{})
	_, err := c.Capabilities(context.Background(), publish)
	var ue *discovery.UnavailableError
	if !errors.Is(err, discovery.ErrUnavailable) || !errors.As(err, &ue) || ue.State != discovery.StateUninitialized {
		t.Fatalf("Capabilities with the registry down from the start = %v, want ErrUnavailable (uninitialized)", err)
	}
	if st := c.State(publish); st != discovery.StateUninitialized {
		t.Errorf("State = %s", st)
	}
}

// TestOutageCompressed: the decisive pair on an injected clock. One registry outage of an
// hour: a read that declares nothing is answered from the last-known-good view all along
// (routing never stops on staleness), while a read that declares MaxStale 30 s is refused
// past 30 s and answered again the moment the registry is back. A client with a stale
// allowance of 10 minutes (the old default, now chosen) stops every read past it.
func TestOutageCompressed(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	registerOne(t, s.Registry, "jms-1")
	front, srv := newFront(t, s.Config.Handler)
	prom := prometheus.NewRegistry()
	c, clk := newClient(t, srv.URL, discovery.Config{Registerer: prom, Consumer: "test"})
	ctx := context.Background()
	revocable := publish
	revocable.MaxStale = 30 * time.Second
	if _, err := c.Capabilities(ctx, publish); err != nil {
		t.Fatal(err)
	}
	front.set(down)
	served, refused := 0, 0
	// one lookup of each every 15 s for an hour
	for elapsed := 15 * time.Second; elapsed <= time.Hour; elapsed += 15 * time.Second {
		clk.Advance(15 * time.Second)
		res, err := c.Capabilities(ctx, publish)
		if err != nil {
			t.Fatalf("at %v: %v, want the last-known-good view", elapsed, err)
		}
		if elapsed >= discovery.DefaultTTL && (res.Source != discovery.SourceSnapshot || res.State != discovery.StateStale || res.Age != elapsed || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "") {
			t.Fatalf("at %v: %+v %v", elapsed, res.Meta, ids(res.Entries))
		}
		served++
		_, err = c.Capabilities(ctx, revocable)
		var ue *discovery.UnavailableError
		switch {
		case elapsed <= 30*time.Second && err != nil:
			t.Fatalf("at %v, within its max_stale: %v", elapsed, err)
		case elapsed > 30*time.Second && (!errors.As(err, &ue) || ue.State != discovery.StateExpired || ue.MaxStale != 30*time.Second):
			t.Fatalf("at %v, past its max_stale of 30 s: %v, want ErrUnavailable (expired)", elapsed, err)
		case err != nil:
			refused++
		}
	}
	if served != 240 || refused != 238 {
		t.Errorf("%d reads served and %d revocable ones refused, want 240 and 238", served, refused)
	}
	if got := testutil.ToFloat64(counter(t, prom, "meshflows_discovery_stale_refused_total")); got != float64(refused) {
		t.Errorf("stale_refused_total = %v, want %d", got, refused)
	}
	// back: both fresh again at once
	front.set(s.Config.Handler)
	clk.Advance(time.Second)
	if res, err := c.Capabilities(ctx, publish); err != nil || res.Source != discovery.SourceFresh {
		t.Errorf("after the outage: %v %+v", err, res)
	}
	if res, err := c.Capabilities(ctx, revocable); err != nil || res.State != discovery.StateFresh {
		t.Errorf("the revocable read after the outage: %v %+v", err, res)
	}

	// a client that chose a stale allowance of 10 minutes stops every read past it
	bounded, bclk := newClient(t, srv.URL, discovery.Config{StaleAllowance: 10 * time.Minute})
	if _, err := bounded.Capabilities(ctx, publish); err != nil {
		t.Fatal(err)
	}
	front.set(down)
	bclk.Advance(10 * time.Minute)
	if _, err := bounded.Capabilities(ctx, publish); err != nil {
		t.Errorf("at its allowance: %v", err)
	}
	bclk.Advance(15 * time.Second)
	var ue *discovery.UnavailableError
	if _, err := bounded.Capabilities(ctx, publish); !errors.As(err, &ue) || ue.State != discovery.StateExpired {
		t.Errorf("past its allowance: %v, want ErrUnavailable (expired)", err)
	}
}

func counter(t *testing.T, g prometheus.Gatherer, name string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
	for _, mf := range mfs {
		if mf.GetName() == name {
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return c
}

func TestSteadyStateHitRate(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	registerOne(t, s.Registry, "jms-1")
	front, srv := newFront(t, s.Config.Handler)
	c, clk := newClient(t, srv.URL, discovery.Config{TTL: 30 * time.Second})
	const lookups = 1000
	for range lookups {
		if _, err := c.Capabilities(context.Background(), publish); err != nil {
			t.Fatal(err)
		}
		clk.Advance(600 * time.Millisecond) // 10 minutes of lookups, 100 per minute
	}
	hitRate := 1 - float64(front.hits.Load())/lookups
	if hitRate < 0.95 {
		t.Errorf("cache hit rate %.3f (%d registry requests for %d lookups), want >= 0.95", hitRate, front.hits.Load(), lookups)
	}
}

// scripted is a fake registry that answers discovery requests from a queue.
type scripted struct {
	mu      sync.Mutex
	answers []any // apiv1.DiscoveryResponse, or a string body
}

func (s *scripted) push(a ...any) { s.mu.Lock(); s.answers = append(s.answers, a...); s.mu.Unlock() }

func (s *scripted) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.answers) == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	if body, ok := a.(string); ok {
		w.Write([]byte(body))
		return
	}
	json.NewEncoder(w).Encode(a)
}

func answer(epoch string, rev int64, complete bool, instances ...string) apiv1.DiscoveryResponse {
	r := apiv1.DiscoveryResponse{RegistryEpoch: epoch, Revision: rev, Complete: complete, Capabilities: []apiv1.CapabilityEntry{}}
	for _, id := range instances {
		r.Capabilities = append(r.Capabilities, apiv1.CapabilityEntry{InstanceID: id, CapabilityID: "messaging.publish", Provider: "jms", CapabilityVersion: "1.0.0"})
	}
	return r
}

// removing lists ids as removed in the registry's epoch (an incomplete answer's removed).
func removing(r apiv1.DiscoveryResponse, ids ...string) apiv1.DiscoveryResponse {
	for _, id := range ids {
		r.Removed = append(r.Removed, apiv1.Removal{InstanceID: id, Generation: 1})
	}
	return r
}

func TestOrderingAndMerging(t *testing.T) {
	type step struct {
		answer any
		want   []string
		rev    int64
		epoch  string
		state  discovery.State
		source discovery.Source
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"an older revision never replaces a newer view", []step{
			{answer("e1", 5, true, "a", "b"), []string{"a", "b"}, 5, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e1", 3, true, "a"), []string{"a", "b"}, 5, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e1", 6, true, "a"), []string{"a"}, 6, "e1", discovery.StateFresh, discovery.SourceFresh},
		}},
		{"an epoch change resets, whatever its revision", []step{
			{answer("e1", 50, true, "a", "b"), []string{"a", "b"}, 50, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e2", 2, true, "c"), []string{"c"}, 2, "e2", discovery.StateFresh, discovery.SourceFresh},
		}},
		{"an incomplete answer after a restart is merged, not applied", []step{
			{answer("e1", 9, true, "a", "b"), []string{"a", "b"}, 9, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e2", 0, false), []string{"a", "b"}, 0, "e2", discovery.StateFresh, discovery.SourceFresh},
			{answer("e2", 1, false, "c"), []string{"a", "b", "c"}, 1, "e2", discovery.StateFresh, discovery.SourceFresh},
			{answer("e2", 2, true, "a", "c"), []string{"a", "c"}, 2, "e2", discovery.StateFresh, discovery.SourceFresh},
		}},
		{"an incomplete answer drops what it says the registry removed", []step{
			{answer("e1", 9, true, "a", "b", "c"), []string{"a", "b", "c"}, 9, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e2", 2, false, "a", "b"), []string{"a", "b", "c"}, 2, "e2", discovery.StateFresh, discovery.SourceFresh},
			{removing(answer("e2", 3, false, "a"), "b"), []string{"a", "c"}, 3, "e2", discovery.StateFresh, discovery.SourceFresh},
			{removing(answer("e2", 4, false, "a", "b"), "b", "c"), []string{"a", "b"}, 4, "e2", discovery.StateFresh, discovery.SourceFresh},
		}},
		{"a decode failure is not an empty answer", []step{
			{answer("e1", 4, true, "a"), []string{"a"}, 4, "e1", discovery.StateFresh, discovery.SourceFresh},
			{`{"registry_epoch": "e1", "revision": 5, "capabilities": [`, []string{"a"}, 4, "e1", discovery.StateStale, discovery.SourceSnapshot},
			{`<html>oops</html>`, []string{"a"}, 4, "e1", discovery.StateStale, discovery.SourceSnapshot},
			{`{}`, []string{"a"}, 4, "e1", discovery.StateStale, discovery.SourceSnapshot},
		}},
		{"authoritative empty only when complete", []step{
			{answer("e1", 1, false), nil, 1, "e1", discovery.StateFresh, discovery.SourceFresh},
			{answer("e1", 2, true), nil, 2, "e1", discovery.StateAuthoritativeEmpty, discovery.SourceFresh},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &scripted{}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			c, clk := newClient(t, srv.URL, discovery.Config{})
			for i, st := range tt.steps {
				fake.push(st.answer)
				clk.Advance(discovery.DefaultTTL) // every read asks the registry
				res, err := c.Capabilities(context.Background(), publish)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if diff := cmp.Diff(st.want, ids(res.Entries)); diff != "" {
					t.Errorf("step %d entries (-want +got):\n%s", i, diff)
				}
				if res.Revision != st.rev || res.RegistryEpoch != st.epoch || res.State != st.state || res.Source != st.source {
					t.Errorf("step %d: %+v, want rev %d epoch %s state %s source %s", i, res.Meta, st.rev, st.epoch, st.state, st.source)
				}
			}
		})
	}
}

func TestRestartedRegistryDoesNotEmptyConsumers(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	registerOne(t, s.Registry, "jms-1")
	s.Clock.Advance(registry.DefaultLeaseTTL)
	front, srv := newFront(t, s.Config.Handler)
	c, clk := newClient(t, srv.URL, discovery.Config{})
	if res, err := c.Capabilities(context.Background(), publish); err != nil || !res.Complete || len(res.Entries) != 1 {
		t.Fatalf("before the restart: %v %+v", err, res)
	}
	restarted := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(time.Hour)) // a new epoch, empty, warming up
	front.set(restarted.Config.Handler)
	clk.Advance(discovery.DefaultTTL)
	res, err := c.Capabilities(context.Background(), publish)
	if err != nil || res.Complete || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "" {
		t.Fatalf("after the restart: %v %+v %v, want jms-1 kept, incomplete", err, res.Meta, ids(res.Entries))
	}
	// the warm-up ends without jms-1 coming back: now it is gone for real
	restarted.Clock.Advance(registry.DefaultLeaseTTL)
	clk.Advance(discovery.DefaultTTL)
	if res, err := c.Capabilities(context.Background(), publish); err != nil || !res.Complete || len(res.Entries) != 0 {
		t.Fatalf("after the warm-up: %v %+v", err, res)
	}
}

// TestUnreachableDropsWhatOnlyTheWarmUpKeeps: after an empty restart a view keeps what it
// knew through the warm-up; an instance it keeps only from before the restart that refuses a
// connection (its provider died while the registry was down) is dropped at once, from every
// view, while one the restarted registry answers for, or any instance of a complete view, is
// kept (the registry judges those).
func TestUnreachableDropsWhatOnlyTheWarmUpKeeps(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	registerOne(t, s.Registry, "jms-1")
	registerOne(t, s.Registry, "jms-2")
	s.Clock.Advance(registry.DefaultLeaseTTL)
	front, srv := newFront(t, s.Config.Handler)
	reg := prometheus.NewRegistry()
	c, clk := newClient(t, srv.URL, discovery.Config{Registerer: reg})
	all := discovery.Query{CapabilityID: "messaging.publish", IncludeAll: true}
	for _, q := range []discovery.Query{publish, all} {
		if res, err := c.Capabilities(context.Background(), q); err != nil || !res.Complete || len(res.Entries) != 2 {
			t.Fatalf("before the restart: %v %+v", err, res)
		}
	}
	if n := c.Unreachable("jms-2"); n != 0 {
		t.Errorf("a complete view dropped jms-2 (%d views): the registry judges it", n)
	}
	restarted := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(time.Hour)) // empty, warming up
	registerOne(t, restarted.Registry, "jms-1")                                                     // back; jms-2 died meanwhile
	front.set(restarted.Config.Handler)
	clk.Advance(discovery.DefaultTTL)
	for _, q := range []discovery.Query{publish, all} {
		res, err := c.Capabilities(context.Background(), q)
		if err != nil || res.Complete || cmp.Diff([]string{"jms-1", "jms-2"}, ids(res.Entries)) != "" {
			t.Fatalf("after the restart: %v %+v %v, want both kept, incomplete", err, res.Meta, ids(res.Entries))
		}
	}
	if n := c.Unreachable("jms-1"); n != 0 {
		t.Errorf("jms-1, which the restarted registry answers for, was dropped from %d views", n)
	}
	if n := c.Unreachable("jms-2"); n != 2 {
		t.Errorf("jms-2 dropped from %d views, want 2", n)
	}
	for _, q := range []discovery.Query{publish, all} {
		res, err := c.Capabilities(context.Background(), q) // from the cache: within the TTL
		if err != nil || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "" {
			t.Errorf("after jms-2 refused: %v %v, want jms-1 alone", err, ids(res.Entries))
		}
	}
	// and the next warm-up answer does not bring it back
	clk.Advance(discovery.DefaultTTL)
	if res, err := c.Capabilities(context.Background(), publish); err != nil || res.Complete || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "" {
		t.Errorf("the next answer: %v %+v %v, want jms-1 alone, still warming up", err, res.Meta, ids(res.Entries))
	}
	if got := testutil.ToFloat64(counter(t, reg, "meshflows_discovery_unreachable_forgotten_total")); got != 1 {
		t.Errorf("forgotten counted %v, want 1", got)
	}
}

func TestInvalidateKeepsLastKnownGood(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	registerOne(t, s.Registry, "jms-1")
	front, srv := newFront(t, s.Config.Handler)
	c, _ := newClient(t, srv.URL, discovery.Config{})
	ctx := context.Background()
	c.Capabilities(ctx, publish)
	registerOne(t, s.Registry, "jms-2")
	c.Invalidate()
	res, err := c.Capabilities(ctx, publish)
	if err != nil || res.Source != discovery.SourceFresh || len(res.Entries) != 2 {
		t.Fatalf("after Invalidate: %v %+v", err, res)
	}
	front.set(down)
	c.Invalidate()
	res, err = c.Capabilities(ctx, publish)
	if err != nil || res.Source != discovery.SourceSnapshot || len(res.Entries) != 2 {
		t.Fatalf("Invalidate with the registry down: %v %+v, want the last-known-good view", err, res)
	}
}

func TestConcurrentReadsShareOneRefresh(t *testing.T) {
	release := make(chan struct{})
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		<-release
		json.NewEncoder(w).Encode(answer("e1", 1, true, "a"))
	}))
	defer srv.Close()
	c, _ := newClient(t, srv.URL, discovery.Config{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := c.Capabilities(context.Background(), publish); err != nil {
				t.Error(err)
			}
		})
	}
	for requests.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // let the other readers join the refresh in flight
	close(release)
	wg.Wait()
	if n := requests.Load(); n != 1 {
		t.Errorf("%d registry requests for 20 concurrent reads, want 1", n)
	}
}

func TestWatchDeliversChanges(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	c, err := discovery.New(discovery.Config{Registries: []string{s.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan *discovery.Result, 16)
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, publish, func(r *discovery.Result) { changes <- r }) }()
	first := <-changes
	if len(first.Entries) != 0 {
		t.Fatalf("first view: %v", ids(first.Entries))
	}
	for s.Registry.Watchers() == 0 { // the long poll is parked
		time.Sleep(time.Millisecond)
	}
	registerOne(t, s.Registry, "jms-1")
	got := <-changes
	if cmp.Diff([]string{"jms-1"}, ids(got.Entries)) != "" || got.Revision != 1 {
		t.Errorf("change: %+v %v", got.Meta, ids(got.Entries))
	}
	// readers are served from the view the watch keeps
	if res, err := c.Capabilities(context.Background(), publish); err != nil || res.Source != discovery.SourceCache || len(res.Entries) != 1 {
		t.Errorf("read during a watch: %v %+v", err, res)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, cfg := range map[string]discovery.Config{
		"no registry":  {},
		"bad url":      {Registries: []string{"localhost:7400"}},
		"negative ttl": {Registries: []string{"http://r"}, TTL: -time.Second},
		"long wait":    {Registries: []string{"http://r"}, WatchWait: time.Hour},
	} {
		if _, err := discovery.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestReadDoesNotQueueBehindALongPoll: a read that must ask the registry (here after
// Invalidate) gets its own request; it does not wait for the watch's long poll, which the
// registry may hold for the whole wait.
func TestReadDoesNotQueueBehindALongPoll(t *testing.T) {
	held := make(chan struct{})    // closed when the watch's long poll is being held
	release := make(chan struct{}) // closed at the end of the test
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("index") {
			once.Do(func() { close(held) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"registry_epoch":"e1","revision":1,"complete":true,"manifests":[],"public_paths":[]}`)
	}))
	defer srv.Close()
	defer close(release)
	c, err := discovery.New(discovery.Config{Registries: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.WatchRoutes(ctx, nil)
	<-held

	c.Invalidate()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second) // a hang bound, not a timing assertion
	defer rcancel()
	res, err := c.Routes(rctx)
	if err != nil {
		t.Fatalf("Routes after Invalidate while a long poll is held: %v", err)
	}
	if res.Source != discovery.SourceFresh || rctx.Err() != nil {
		t.Errorf("Routes answered from %s (context: %v), want a fresh answer of its own", res.Source, rctx.Err())
	}
}

// TestRestoreNeverRewinds: a registry killed just after a deregistration and restored from
// its last snapshot holds the withdrawn instance again (until its lease ends). The restore is
// a new epoch, so no pre-crash ETag matches; the withdrawn instance comes back marked
// restored, and a consumer that had seen it go does not take it back; one it still knew stays.
func TestRestoreNeverRewinds(t *testing.T) {
	ctx := context.Background()
	s := registrytest.NewServer(t, registry.Config{SnapshotDir: t.TempDir()})
	s.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: snapshots are written
	registerOne(t, s.Registry, "jms-1")
	registerOne(t, s.Registry, "jms-2")
	snap, err := s.Registry.WriteSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Registry.Deregister(ctx, "jms-2", 0); err != nil {
		t.Fatal(err)
	}
	front, srv := newFront(t, s.Config.Handler)
	c, clk := newClient(t, srv.URL, discovery.Config{})
	if res, err := c.Capabilities(ctx, publish); err != nil || cmp.Diff([]string{"jms-1"}, ids(res.Entries)) != "" {
		t.Fatalf("before the crash: %v %+v", err, res)
	}
	etag := get(t, srv.URL+"/v1/discovery/capabilities", "").Header.Get("ETag")

	// killed a second later, restored from the snapshot; one provider registers at once
	restored := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(registry.DefaultLeaseTTL+time.Second))
	if _, err := restored.Registry.RestoreSnapshot(ctx, snap.Path); err != nil {
		t.Fatal(err)
	}
	registerOne(t, restored.Registry, "jms-3")
	front.set(restored.Config.Handler)
	if resp := get(t, srv.URL+"/v1/discovery/capabilities", etag); resp.StatusCode != http.StatusOK {
		t.Fatalf("pre-crash ETag %s answered %d by the restored registry (ETag %s), want 200", etag, resp.StatusCode, resp.Header.Get("ETag"))
	}
	clk.Advance(discovery.DefaultTTL)
	res, err := c.Capabilities(ctx, publish)
	if err != nil || res.Complete || cmp.Diff([]string{"jms-1", "jms-3"}, ids(res.Entries)) != "" {
		t.Fatalf("after the restore: %v %+v %v; want jms-1 (restored, known) and jms-3, not the withdrawn jms-2", err, res.Meta, ids(res.Entries))
	}
	// a consumer that starts now knows nothing better: it takes the restored instances
	fresh, _ := newClient(t, srv.URL, discovery.Config{})
	if res, err := fresh.Capabilities(ctx, publish); err != nil || cmp.Diff([]string{"jms-1", "jms-2", "jms-3"}, ids(res.Entries)) != "" {
		t.Fatalf("a new consumer after the restore: %v %v", err, ids(res.Entries))
	}
}

// get sends a GET with If-None-Match etag (when set) and returns the closed response.
func get(t *testing.T, url, etag string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
