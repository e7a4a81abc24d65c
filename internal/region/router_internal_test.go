package region

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/routingcontrol"
	"github.com/meshflows/meshflows/internal/testtool"
)

// fakePool is a region's gateway: a pool state, and an answer (every failEvery-th a 500).
type fakePool struct {
	state     atomic.Int64
	served    atomic.Int64
	failEvery int64
}

func (p *fakePool) PoolState(*http.Request) gateway.PoolState {
	return gateway.PoolState(p.state.Load())
}
func (p *fakePool) ViewSource() (discovery.Source, time.Duration) {
	return discovery.SourceFresh, 0
}
func (p *fakePool) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := p.served.Add(1)
	if p.failEvery > 0 && n%p.failEvery == 0 {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func ready() *fakePool {
	p := &fakePool{}
	p.state.Store(int64(gateway.PoolReady))
	return p
}

// fakeSignal is the routing control as a consumer holds it.
type fakeSignal struct {
	v atomic.Pointer[routingcontrol.View]
}

func (s *fakeSignal) View() *routingcontrol.View { return s.v.Load() }

func (s *fakeSignal) set(at time.Time, off ...string) {
	v := &routingcontrol.View{Read: true, Signal: apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}}
	for _, r := range []string{"a", "b", "c"} {
		v.Signal.Regions[r] = apiv1.RegionSwitch{State: apiv1.RegionOn, At: at.Add(-time.Hour)}
	}
	for _, r := range off {
		v.Signal.Regions[r] = apiv1.RegionSwitch{State: apiv1.RegionOff, At: at}
	}
	s.v.Store(v)
}

func (s *fakeSignal) on(r string, at time.Time) {
	v := *s.v.Load()
	v.Signal.Regions = map[string]apiv1.RegionSwitch{}
	for k, x := range s.v.Load().Signal.Regions {
		v.Signal.Regions[k] = x
	}
	v.Signal.Regions[r] = apiv1.RegionSwitch{State: apiv1.RegionOn, At: at, ReturnedAt: at}
	s.v.Store(&v)
}

func serve(t *testing.T, r *Router) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/orders", nil))
	return rec.Header().Get("X-MeshFlows-Region") + " " + http.StatusText(rec.Code)
}

// TestWhereARequestGoes: the table of where a request goes, region by region.
func TestWhereARequestGoes(t *testing.T) {
	const none, panicking, ok = gateway.PoolNone, gateway.PoolPanic, gateway.PoolReady
	cases := []struct {
		name    string
		off     []string
		a, b, c gateway.PoolState
		want    string
	}{
		{"home on and ready", nil, ok, ok, ok, "a OK"},
		{"home off: the next on region", []string{"a"}, ok, ok, ok, "c OK"},
		{"home and the first peer off", []string{"a", "c"}, ok, ok, ok, "b OK"},
		{"home in panic: spill", nil, panicking, ok, ok, "c OK"},
		{"home without upstream: spill", nil, none, panicking, ok, "c OK"},
		{"home without upstream, first peer in panic", nil, none, ok, panicking, "b OK"},
		{"every pool in panic: home's panic answer", nil, panicking, panicking, panicking, "a OK"},
		{"home off, others in panic: the first on with a pool", []string{"a"}, ok, panicking, panicking, "c OK"},
		{"home off, no pool anywhere on", []string{"a"}, ok, none, none, " Service Unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testtool.OffsetClock{}
			sig := &fakeSignal{}
			sig.set(clock.Now(), tc.off...)
			pools := map[string]*fakePool{"a": ready(), "b": ready(), "c": ready()}
			pools["a"].state.Store(int64(tc.a))
			pools["b"].state.Store(int64(tc.b))
			pools["c"].state.Store(int64(tc.c))
			r, err := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now}, Priority: []string{"c", "b"}, Regions: map[string]Pool{"a": pools["a"], "b": pools["b"], "c": pools["c"]}})
			if err != nil {
				t.Fatal(err)
			}
			if got := serve(t, r); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTheWayBackIsCapped: a region switched back on gets 1, 5, 25, 50 % of its traffic, each
// step for the dwell, then all of it; a consumer started mid-ramp starts from the first step.
func TestTheWayBackIsCapped(t *testing.T) {
	clock := &testtool.OffsetClock{}
	sig := &fakeSignal{}
	sig.set(clock.Now(), "a")
	a, b := ready(), ready()
	rnd := rand.New(rand.NewPCG(1, 2))
	r, err := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now, Dwell: time.Minute, Rand: rnd.Float64}, Regions: map[string]Pool{"a": a, "b": b}})
	if err != nil {
		t.Fatal(err)
	}
	share := func() float64 {
		a0, b0 := a.served.Load(), b.served.Load()
		for range 10_000 {
			serve(t, r)
		}
		da, db := a.served.Load()-a0, b.served.Load()-b0
		return float64(da) / float64(da+db)
	}
	if s := share(); s != 0 {
		t.Fatalf("a off: share %v", s)
	}
	sig.on("a", clock.Now())
	r.plan.Update()
	for _, want := range []float64{0.01, 0.05, 0.25, 0.50, 1} {
		if got := share(); got < want-0.02 || got > want+0.02 {
			t.Errorf("step %v: share %.4f", want, got)
		}
		clock.Advance(30 * time.Second)
		r.plan.Update()
		if got := r.Status().Regions[0].Share; got != want {
			t.Errorf("the step moved before its dwell: %v, want %v", got, want)
		}
		clock.Advance(30 * time.Second)
		r.plan.Update()
	}
	// a new consumer, a minute and a half into the way back: from the first step
	sig.on("a", clock.Now().Add(-90*time.Second))
	r2, _ := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now, Dwell: time.Minute}, Regions: map[string]Pool{"a": a, "b": b}})
	if got := r2.Status().Regions[0]; !got.Ramping || got.Share != 0.01 {
		t.Errorf("restarted mid-ramp: %+v", got)
	}
	// a region declared a moment ago (never off) is not on a way back
	sig.set(clock.Now())
	sig.v.Load().Signal.Regions["a"] = apiv1.RegionSwitch{State: apiv1.RegionOn, At: clock.Now()}
	r3, _ := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now, Dwell: time.Minute}, Regions: map[string]Pool{"a": a, "b": b}})
	if got := r3.Status().Regions[0]; got.Ramping || got.Share != 1 {
		t.Errorf("a region just declared: %+v", got)
	}
}

// TestTheWayBackIsHeldWhileAnOutlier: a returning region answering 500 to half its requests
// stays at its step while the others answer well, and moves on once it is well.
func TestTheWayBackIsHeldWhileAnOutlier(t *testing.T) {
	clock := &testtool.OffsetClock{}
	sig := &fakeSignal{}
	sig.set(clock.Now(), "a")
	a, b := ready(), ready()
	a.failEvery = 2
	r, err := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now, Dwell: time.Minute, Window: 2 * time.Minute, Steps: []float64{0.25, 0.5}}, Regions: map[string]Pool{"a": a, "b": b}})
	if err != nil {
		t.Fatal(err)
	}
	sig.on("a", clock.Now())
	r.plan.Update()
	for range 2000 {
		serve(t, r)
	}
	clock.Advance(time.Minute)
	r.plan.Update()
	st := r.Status().Regions[0]
	if !st.Held || st.Share != 0.25 || !st.Outlier {
		t.Fatalf("not held: %+v", st)
	}
	a.failEvery = 0
	clock.Advance(3 * time.Minute) // the failures leave the window
	for range 2000 {
		serve(t, r)
	}
	r.plan.Update()
	if st := r.Status().Regions[0]; st.Held || st.Share != 0.5 {
		t.Fatalf("still held: %+v", st)
	}
}

// TestStatusSaysTheSignal: GET /v1/gateway/regions shows the order, the switches and a
// stale signal.
func TestStatusSaysTheSignal(t *testing.T) {
	clock := &testtool.OffsetClock{}
	sig := &fakeSignal{}
	sig.set(clock.Now(), "b")
	v := *sig.View()
	v.Stale, v.Error = true, "context deadline exceeded"
	sig.v.Store(&v)
	r, _ := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now}, Regions: map[string]Pool{"a": ready(), "b": ready()}})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, apiv1.PathGatewayRegions, nil))
	var got apiv1.GatewayRegions
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, got.Priority); diff != "" {
		t.Error(diff)
	}
	if !got.Signal.Stale || !got.Signal.Configured || got.Regions[1].On || !got.Regions[0].On {
		t.Errorf("%+v", got)
	}
}

// TestARefusedRequestGoesToTheNextRegion: a request every upstream of home refused before
// anything was sent is sent, body and all, to the next region that is on and ready; with no
// such region it is a 502.
func TestARefusedRequestGoesToTheNextRegion(t *testing.T) {
	clock := &testtool.OffsetClock{}
	sig := &fakeSignal{}
	sig.set(clock.Now())
	a := &declining{}
	a.state.Store(int64(gateway.PoolReady))
	b := &echo{}
	b.state.Store(int64(gateway.PoolReady))
	r, err := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now}, Regions: map[string]Pool{"a": a, "b": b}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("payload")))
	if rec.Code != http.StatusOK || rec.Body.String() != "b got payload" || rec.Header().Get("X-MeshFlows-Region") != "b" {
		t.Errorf("answered %d %q by %q", rec.Code, rec.Body, rec.Header().Get("X-MeshFlows-Region"))
	}
	b.state.Store(int64(gateway.PoolNone))
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("payload")))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "no other region") {
		t.Errorf("with no other region ready: %d %q", rec.Code, rec.Body)
	}
}

// declining is a region whose upstreams all refuse: it declines when asked, else 502.
type declining struct{ fakePool }

func (p *declining) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if d := gateway.DeclineFrom(req.Context()); d != nil {
		d.Declined, d.Err = true, errors.New("connection refused")
		d.Body = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		return
	}
	w.WriteHeader(http.StatusBadGateway)
}

// echo is a region that answers with what it got.
type echo struct{ fakePool }

func (p *echo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	io.WriteString(w, "b got "+string(body))
}

// BenchmarkRouterServe is the router's own cost per request over two regions, home ready:
// the choice, the counter, the status writer and the decline context (the pools do nothing).
func BenchmarkRouterServe(b *testing.B) {
	clock := &testtool.OffsetClock{}
	sig := &fakeSignal{}
	sig.set(clock.Now())
	r, err := New(Config{PlanConfig: PlanConfig{Home: "a", Signal: sig, Now: clock.Now}, Regions: map[string]Pool{"a": ready(), "b": ready()}})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/orders", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r.ServeHTTP(w, req)
	}
}
