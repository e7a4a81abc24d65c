package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/orchestrator"
)

// fakeClock is a clock that moves only when told to, with timers (Now and After of
// orchestrator.Config).
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeTimer{c.now.Add(d), ch})
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// eventually waits (real time, for other goroutines to act, never for time to pass) until
// cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// setOrchestrator is an orchestrator with no registry, on clock, with one set-only
// workflow published.
func setOrchestrator(t *testing.T, clock *fakeClock, name, invocation string) *orchestrator.Orchestrator {
	t.Helper()
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	// OutcomeWindow -1: no outcome reports, whose timer on the fake clock would count as the
	// scheduler's waiting (pending) before the scheduler waits
	cfg := orchestrator.Config{Discovery: disc, OutcomeWindow: -1}
	if clock != nil {
		cfg.Now, cfg.After = clock.Now, clock.After
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("name: %s\ninvocation: %s\nsteps:\n  - {id: s, type: set, set: {k: 1}}\n", name, invocation)
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	if _, err := o.Publish(name); err != nil {
		t.Fatal(err)
	}
	return o
}

// history is a workflow's history, oldest first.
func history(t *testing.T, o *orchestrator.Orchestrator, name string) []*apiv1.Run {
	t.Helper()
	h, err := o.Runs(name)
	if err != nil {
		t.Fatal(err)
	}
	runs := h.Runs
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].StartedAt.Before(runs[j].StartedAt) })
	return runs
}

// TestSchedulesOnTime: each schedule fires from its own definition on a fake clock: every
// tick of @every 1s for 20 s is a run, @every 5s runs 5 s apart, and fires missed while the
// orchestrator was busy are recorded as missed, not dropped.
func TestSchedulesOnTime(t *testing.T) {
	for _, tt := range []struct {
		name     string
		schedule string
		step     time.Duration // how far the clock moves at a time
		steps    int
		period   time.Duration
		want     []string // the statuses of the history, oldest first
		gap      time.Duration
	}{
		{"@every 1s for 20 s", "@every 1s", time.Second, 20, time.Second, repeat(apiv1.RunSucceeded, 20), time.Second},
		{"@every 5s for 20 s", "@every 5s", time.Second, 20, 5 * time.Second, repeat(apiv1.RunSucceeded, 4), 5 * time.Second},
		{"10 s at once", "@every 1s", 10 * time.Second, 1, time.Second, []string{apiv1.RunMissed, apiv1.RunSucceeded}, 0},
		{"a daily fire two minutes late", "@daily", 24*time.Hour + 2*time.Minute, 1, 24 * time.Hour, []string{apiv1.RunMissed}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			if tt.schedule == "@daily" {
				clock.Advance(14 * time.Hour) // midnight plus 2 minutes
			}
			o := setOrchestrator(t, clock, "tick", `{type: [schedule], schedule: "`+tt.schedule+`"}`)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- o.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			for i := range tt.steps {
				eventually(t, "the scheduler to wait", func() bool { return clock.pending() > 0 })
				clock.Advance(tt.step)
				fires := min(int(time.Duration(i+1)*tt.step/tt.period), len(tt.want))
				eventually(t, fmt.Sprintf("%d fires to be recorded", fires), func() bool {
					runs := history(t, o, "tick")
					return len(runs) >= fires && (len(runs) == 0 || runs[len(runs)-1].Status != apiv1.RunRunning)
				})
			}
			runs := history(t, o, "tick")
			var got []string
			for i, r := range runs {
				got = append(got, r.Status)
				if tt.gap > 0 && i > 0 {
					if gap := r.StartedAt.Sub(runs[i-1].StartedAt); gap != tt.gap {
						t.Errorf("run %d started %s after the one before, want %s", i, gap, tt.gap)
					}
				}
				if r.Status == apiv1.RunMissed && r.Note == "" {
					t.Errorf("a missed fire without a note: %+v", r)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("history = %v, want %v", got, tt.want)
			}
			if tt.name == "10 s at once" && !strings.HasPrefix(runs[0].Note, "9 scheduled fire(s) missed") {
				t.Errorf("missed note = %q", runs[0].Note)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// blockingProvider answers invokes only when release is closed (or the caller gives up);
// invoked receives one value per invoke that arrived.
func blockingProvider(t *testing.T) (url string, release chan struct{}, invoked chan struct{}) {
	release, invoked = make(chan struct{}), make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/invoke") {
			invoked <- struct{}{}
		}
		select {
		case <-release:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"output": {"ok": true}}`))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, release, invoked
}

// slowOrchestrator runs workflow "slow", one service_call to a provider that answers when
// told to, over HTTP.
func slowOrchestrator(t *testing.T, cfg orchestrator.Config, timeout string) (o *orchestrator.Orchestrator, srv *httptest.Server, release, invoked chan struct{}) {
	t.Helper()
	url, release, invoked := blockingProvider(t)
	cfg.Discovery, _ = discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	cfg.Static = []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: url}}
	o, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := "name: slow\ninvocation: {type: http}\nvalidation: {provider_strict: false}\nsteps:\n" +
		"  - id: call\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish, provider: jms}\n" +
		"    request: {destination: d}\n    timeout: " + timeout + "\n  - {id: after, type: set, set: {k: 1}}\n"
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	if _, err := o.Publish("slow"); err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(o.Handler())
	t.Cleanup(srv.Close)
	return o, srv, release, invoked
}

// post sends a POST and returns the status, the Retry-After header and the decoded body.
func post(t *testing.T, url string) (int, string, map[string]any) {
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Error(err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), body
}

// TestConcurrentRunsUpToTheBound: HTTP runs of one workflow run side by side up to
// MaxConcurrentRuns; the next is refused with 429 and Retry-After, and the in-progress runs
// are listed as running.
func TestConcurrentRunsUpToTheBound(t *testing.T) {
	o, srv, release, invoked := slowOrchestrator(t, orchestrator.Config{MaxConcurrentRuns: 3}, "60s")
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		wg.Go(func() { codes[i], _, _ = post(t, srv.URL+"/v1/workflows/slow/run") })
	}
	for range 3 {
		<-invoked
	}
	h, _ := o.Runs("slow")
	if len(h.Runs) != 3 || h.Runs[0].Status != apiv1.RunRunning {
		t.Errorf("history while 3 run = %d runs, first %+v", len(h.Runs), h.Runs[0])
	}
	code, retry, body := post(t, srv.URL+"/v1/workflows/slow/run")
	if code != http.StatusTooManyRequests || retry == "" {
		t.Errorf("the fourth run = %d (Retry-After %q) %v, want 429 with Retry-After", code, retry, body)
	}
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("run %d = %d", i, c)
		}
	}
	if runs := history(t, o, "slow"); len(runs) != 3 || runs[2].Status != apiv1.RunSucceeded {
		t.Errorf("history after = %+v", runs)
	}
}

// TestCancelARun: a run in progress is cancelled by POST .../cancel (its step says so, the
// steps after it are skipped, and the run's note says by whom); cancelling it again is 409,
// an unknown run 404. Deleting a workflow cancels its runs.
func TestCancelARun(t *testing.T) {
	o, srv, _, invoked := slowOrchestrator(t, orchestrator.Config{}, "5m")
	type answer struct {
		code int
		body map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		c, _, b := post(t, srv.URL+"/v1/workflows/slow/run")
		done <- answer{c, b}
	}()
	<-invoked
	h, _ := o.Runs("slow")
	id := h.Runs[0].RunID
	if code, _, body := post(t, srv.URL+"/v1/workflows/slow/runs/"+id+"/cancel"); code != http.StatusAccepted {
		t.Fatalf("cancel = %d %v", code, body)
	}
	a := <-done
	steps, _ := a.body["steps"].([]any)
	if a.code != http.StatusOK || a.body["status"] != apiv1.RunCancelled || len(steps) != 2 ||
		!strings.Contains(fmt.Sprint(a.body["note"]), "open mode") {
		t.Fatalf("the cancelled run = %d %v", a.code, a.body)
	}
	first, second := steps[0].(map[string]any), steps[1].(map[string]any)
	if first["status"] != apiv1.StepCancelled || first["error"].(map[string]any)["code"] != apiv1.CodeCancelled || second["status"] != apiv1.StepSkipped {
		t.Errorf("steps = %v", steps)
	}
	if code, _, _ := post(t, srv.URL+"/v1/workflows/slow/runs/"+id+"/cancel"); code != http.StatusConflict {
		t.Errorf("cancel of an ended run = %d, want 409", code)
	}
	if code, _, _ := post(t, srv.URL+"/v1/workflows/slow/runs/run-nope/cancel"); code != http.StatusNotFound {
		t.Errorf("cancel of an unknown run = %d, want 404", code)
	}

	go func() {
		c, _, b := post(t, srv.URL+"/v1/workflows/slow/run")
		done <- answer{c, b}
	}()
	<-invoked
	if err := o.Delete("slow"); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-done:
		if a.body["status"] != apiv1.RunCancelled || !strings.Contains(fmt.Sprint(a.body["note"]), "deleted") {
			t.Errorf("the run of a deleted workflow = %d %v", a.code, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deleting the workflow did not end its run")
	}
}

// TestRunBounds: a step timeout above --max-step-timeout is refused at upload, and a run
// longer than --max-run-duration ends with its step stopped.
func TestRunBounds(t *testing.T) {
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc})
	if err != nil {
		t.Fatal(err)
	}
	src := "name: hang\ninvocation: {type: http}\nsteps:\n  - id: call\n    type: service_call\n    capability: {id: messaging.publish}\n    timeout: 1000h\n"
	r, err := o.Upload(context.Background(), []byte(src))
	if err == nil || !strings.Contains(diagnostics(r), "INVALID_VALUE") || !strings.Contains(diagnostics(r), "max-step-timeout") {
		t.Errorf("upload of a 1000h timeout = %v\n%s", err, diagnostics(r))
	}

	o, _, _, _ = slowOrchestrator(t, orchestrator.Config{MaxRunDuration: 200 * time.Millisecond}, "5m")
	run, err := o.RunNow(context.Background(), "slow", "http", nil)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != apiv1.RunFailed || run.Steps[0].Error == nil || run.Steps[0].Error.Code != apiv1.CodeDeadlineExceeded || !strings.Contains(run.Note, "max-run-duration") {
		t.Errorf("a run past its duration = %+v, step %+v", run, run.Steps[0])
	}
}

// TestScheduleSkipsWhileRunning: a fire while the scheduled run before it is in progress is
// recorded as skipped.
func TestScheduleSkipsWhileRunning(t *testing.T) {
	clock := newFakeClock()
	url, release, invoked := blockingProvider(t)
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Now: clock.Now, After: clock.After, OutcomeWindow: -1, // as in setOrchestrator
		Static: []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: url}}})
	if err != nil {
		t.Fatal(err)
	}
	src := "name: tick\ninvocation: {type: [schedule], schedule: \"@every 1s\"}\nvalidation: {provider_strict: false}\nsteps:\n" +
		"  - {id: call, type: service_call, capability: {id: messaging.publish, provider: jms}, timeout: 5m}\n"
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	o.Publish("tick")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	// a failure below must not leave the provider's handler blocked: the test server's Close
	// would wait for it
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { unblock(); cancel(); <-done })
	eventually(t, "the scheduler to wait", func() bool { return clock.pending() > 0 })
	clock.Advance(time.Second)
	<-invoked
	// The next fire comes while the run holds. Whether the scheduler has re-armed its timer
	// yet cannot be told from the clock (the run's own timers wait on it too: a CI run
	// advanced before the re-arm and never fired again), so the clock moves a second at a
	// time until a skipped fire is recorded.
	eventually(t, "the skipped fire", func() bool {
		clock.Advance(time.Second)
		for _, r := range history(t, o, "tick") {
			if r.Status == apiv1.RunSkipped && strings.Contains(r.Note, "still in progress") {
				return true
			}
		}
		return false
	})
}

// TestUploadsAreJudgedAgainstTheRegistryAsItIs: a step no provider offers is refused as a
// resolution failure, and once the provider is back the next upload passes at once, not
// when the discovery cache expires.
func TestUploadsAreJudgedAgainstTheRegistryAsItIs(t *testing.T) {
	e := newEnv(t, nil, "")
	req := e.rmq.Registration()
	res, err := e.reg.Registry.Register(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Registry.Deregister(context.Background(), req.InstanceID, res.Generation); err != nil {
		t.Fatal(err)
	}
	code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderBatch))
	msg := fmt.Sprint(body["error"])
	if code != http.StatusUnprocessableEntity || !strings.Contains(msg, "resolution validation failed") || !strings.Contains(msg, "CAPABILITY_UNAVAILABLE") {
		t.Fatalf("upload without a rabbitmq provider = %d %s", code, msg)
	}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderBatch)); code != http.StatusCreated {
		t.Errorf("upload once the provider is back = %d %v", code, body["error"])
	}
}
