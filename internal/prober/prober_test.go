package prober

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshflows/meshflows/internal/health"
)

// t0 is the tests' start time.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// results collects what a prober reports.
type results struct {
	mu  sync.Mutex
	got map[string][]string
}

func (r *results) report(res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[res.Target.ID] = append(r.got[res.Target.ID], res.Result)
}

func (r *results) last(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rs := r.got[id]; len(rs) > 0 {
		return rs[len(rs)-1]
	}
	return ""
}

func newTestProber(t *testing.T, targets func() []Target, cfg Config) (*Prober, *results) {
	t.Helper()
	res := &results{got: map[string][]string{}}
	cfg.Targets, cfg.Report = targets, res.report
	cfg.Jitter = func(time.Duration) time.Duration { return 0 }
	if cfg.Timeout == 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, res
}

func TestProberClassifiesAndRecovers(t *testing.T) {
	var failing atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health/live" {
			http.NotFound(w, r) // the declared path, never a default
			return
		}
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer flaky.Close()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	defer slow.Close()
	defer close(hang)
	// Port 1 refuses, as everywhere in the tests: nothing listens there and no test binds it
	// (a port freed after listening could be bound again by a parallel test's server).
	refusedURL := "http://127.0.0.1:1/healthz"

	targets := []Target{
		{ID: "flaky", Generation: 1, URL: flaky.URL + "/health/live", Interval: 5 * time.Second},
		{ID: "slow", Generation: 1, URL: slow.URL + "/healthz", Interval: 5 * time.Second},
		{ID: "gone", Generation: 1, URL: refusedURL, Interval: 5 * time.Second},
	}
	reg := prometheus.NewPedanticRegistry()
	// ConfirmLost 1: every unanswered probe is reported at once (TestProberConfirmsLostProbes
	// tests the confirmation)
	p, res := newTestProber(t, func() []Target { return targets }, Config{Registerer: reg, ConfirmLost: 1})
	ctx := context.Background()
	now := t0
	round := func() {
		t.Helper()
		p.Step(ctx, now)
		p.Wait()
		now = now.Add(5 * time.Second)
	}
	p.Step(ctx, now) // schedules the first probes (jitter 0: due at once)
	round()
	want := map[string]string{"flaky": health.ProbeOK, "slow": health.ProbeTimeout, "gone": health.ProbeRefused}
	for id, w := range want {
		if got := res.last(id); got != w {
			t.Errorf("%s: %q, want %q", id, got, w)
		}
	}
	failing.Store(true)
	round()
	if got := res.last("flaky"); got != health.ProbeFail {
		t.Errorf("a 500: %q, want fail", got)
	}
	failing.Store(false)
	round() // the 500's re-probe: it passes, and is not reported (re-probes confirm failures only)
	round() // the next probe at the interval
	if got := res.last("flaky"); got != health.ProbeOK {
		t.Errorf("recovered: %q, want ok", got)
	}
	for result, min := range map[string]float64{health.ProbeOK: 2, health.ProbeFail: 1, health.ProbeTimeout: 3, health.ProbeRefused: 3} {
		if n := testutil.ToFloat64(p.total.WithLabelValues(result)); n < min {
			t.Errorf("meshflows_probes_total{result=%q} = %v, want >= %v", result, n, min)
		}
	}
}

func TestProberKeepsTheDeclaredIntervalAndBound(t *testing.T) {
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
	}))
	defer srv.Close()
	var targets []Target
	for _, id := range []string{"a", "b", "c", "d"} {
		targets = append(targets, Target{ID: id, Generation: 1, URL: srv.URL, Interval: 30 * time.Second})
	}
	// one admission probe: the first is quick, the rest keep the declared interval
	p, res := newTestProber(t, func() []Target { return targets }, Config{Concurrency: 2, Timeout: 10 * time.Second, AdmissionProbes: 1})
	ctx := context.Background()
	p.Step(ctx, t0)
	if n := p.Step(ctx, t0); n != 2 {
		t.Fatalf("launched %d with 2 slots, want 2", n)
	}
	close(release)
	p.Wait()
	if n := p.Step(ctx, t0.Add(time.Second)); n != 2 {
		t.Fatalf("the two that found no slot: launched %d at the next tick, want 2", n)
	}
	p.Wait()
	if peak.Load() > 2 {
		t.Errorf("%d probes in flight at once, bound is 2", peak.Load())
	}
	// The next probes are due one interval (30 s, give or take a tenth) after each launch.
	if n := p.Step(ctx, t0.Add(20*time.Second)); n != 0 {
		t.Errorf("at 20 s of a 30 s interval: launched %d, want 0", n)
	}
	launched := 0
	for i := range 2 {
		launched += p.Step(ctx, t0.Add(time.Duration(34+i)*time.Second))
		p.Wait()
	}
	if launched != 4 {
		t.Errorf("at 34-35 s: launched %d, want 4", launched)
	}
	if len(res.got["a"]) != 2 {
		t.Errorf("a probed %d times, want 2", len(res.got["a"]))
	}
	// A target that leaves is no longer probed; a new incarnation starts its own schedule.
	targets = targets[:1]
	targets[0].Generation = 2
	if n := p.Step(ctx, t0.Add(70*time.Second)); n != 0 {
		t.Errorf("a new incarnation was probed before its first (jittered) slot")
	}
	if n := p.Step(ctx, t0.Add(70*time.Second)); n != 1 {
		t.Errorf("launched %d for the one target left, want 1", n)
	}
	p.Wait()
}

func TestProberOnlyOnTheLeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var leader atomic.Bool
	p, _ := newTestProber(t, func() []Target { return []Target{{ID: "a", Generation: 1, URL: srv.URL, Interval: time.Second}} },
		Config{Leader: leader.Load})
	p.Step(context.Background(), t0)
	if n := p.Step(context.Background(), t0); n != 0 {
		t.Fatalf("a follower launched %d probes", n)
	}
	leader.Store(true)
	p.Step(context.Background(), t0)
	if n := p.Step(context.Background(), t0); n != 1 {
		t.Fatalf("the leader launched %d probes, want 1", n)
	}
	p.Wait()
}

func TestProberOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	targets := func() []Target {
		return []Target{{ID: "a", Generation: 1, URL: srv.URL + "/healthz", Interval: time.Second}}
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		want   string
	}{
		{"trusting the endpoint's CA", srv.Client(), health.ProbeOK},
		{"with the system's roots only", nil, health.ProbeFail}, // the certificate is not trusted: a failed probe, not a refusal
	} {
		t.Run(tc.name, func(t *testing.T) {
			// a TLS handshake under -race on a busy machine can take longer than the 200 ms
			// the other tests give a probe: this one is about the classification, not speed
			p, res := newTestProber(t, targets, Config{Client: tc.client, Timeout: 5 * time.Second})
			p.Step(context.Background(), t0)
			p.Step(context.Background(), t0)
			p.Wait()
			if got := res.last("a"); got != tc.want {
				t.Errorf("probe over TLS: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProberKeepsTheDeclaredIntervalFromTheStart: a new incarnation is probed once within a
// second of its registration, then at its declared interval and no sooner (the protocol:
// never a substitute interval); the steady-state jitter stays.
func TestProberKeepsTheDeclaredIntervalFromTheStart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	targets := []Target{{ID: "a", Generation: 1, URL: srv.URL, Interval: 30 * time.Second}}
	var jitters []time.Duration
	p, res := newTestProber(t, func() []Target { return targets }, Config{})
	p.cfg.Jitter = func(d time.Duration) time.Duration { jitters = append(jitters, d); return d / 2 }
	ctx := context.Background()
	var at []time.Duration
	for ms := 0; ms <= 70_000; ms += 100 {
		if p.Step(ctx, t0.Add(time.Duration(ms)*time.Millisecond)) > 0 {
			at = append(at, time.Duration(ms)*time.Millisecond)
		}
		p.Wait()
	}
	// first: half of 1 s; then 30 s apart (27 s + half of 6 s)
	want := []time.Duration{500 * time.Millisecond, 30500 * time.Millisecond, 60500 * time.Millisecond}
	if diff := cmp.Diff(want, at); diff != "" {
		t.Fatalf("probe times (-want +got):\n%s", diff)
	}
	if len(res.got["a"]) != 3 {
		t.Errorf("a probed %d times", len(res.got["a"]))
	}
	if jitters[0] != time.Second || jitters[len(jitters)-1] != 30*time.Second/5+1 {
		t.Errorf("jitter ranges %v: want the first within 1 s and the steady one a fifth of the interval", jitters)
	}
}

// TestProberRefusesAnImpostor: a health answer that names another instance is a refused
// probe — another process took the registered address — while one that names the target,
// or names nobody, is ok.
func TestProberRefusesAnImpostor(t *testing.T) {
	tests := []struct {
		name, body string
		want       string
		impostor   string
	}{
		{"names the target", `{"status":"ok","instance_id":"a"}`, health.ProbeOK, ""},
		{"names nobody", `{"status":"ok"}`, health.ProbeOK, ""},
		{"not JSON", `ok`, health.ProbeOK, ""},
		{"names another", `{"status":"ok","instance_id":"b"}`, health.ProbeRefused, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(tt.body)) }))
			defer srv.Close()
			var got Result
			p, err := New(Config{Targets: func() []Target { return nil }, Report: func(Result) {}, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			got = p.probe(context.Background(), Target{ID: "a", URL: srv.URL, Interval: time.Second}, time.Second)
			if got.Result != tt.want || got.Impostor != tt.impostor {
				t.Errorf("%s: result %q impostor %q, want %q %q (%s)", tt.body, got.Result, got.Impostor, tt.want, tt.impostor, got.Detail)
			}
		})
	}
}
