package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/testtool"
)

// TestStalePolicyPerStep: the decisive pair for workflow steps, on an injected clock. One
// registry outage: a step that declares nothing resolves from the last-known-good view past
// 10 minutes (source snapshot); a step with max_stale 30s fails with 503
// STALE_VIEW_EXPIRED past 30 s — or, when the orchestrator has a static capability for it,
// runs on that (source static); back, the registry answers the very next run. A process
// --max-stale (the discovery client's allowance) still stops every step past it.
func TestStalePolicyPerStep(t *testing.T) {
	var down atomic.Bool
	e := newEnv(t, nil, "")
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		e.reg.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	clk := &testtool.OffsetClock{}
	advance := clk.Advance
	newOrch := func(static []orchestrator.StaticCapability, allowance time.Duration) *orchestrator.Orchestrator {
		disc, err := discovery.New(discovery.Config{Registries: []string{front.URL}, RequestTimeout: time.Second, Now: clk.Now,
			TTL: 10 * time.Millisecond, RetryInterval: 10 * time.Millisecond, StaleAllowance: allowance})
		if err != nil {
			t.Fatal(err)
		}
		o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Static: static})
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{"default", "revocable"} {
			wf := "name: " + src + "\ninvocation:\n  type: [http]\nvalidation:\n  provider_strict: false\nsteps:\n" +
				"  - id: s\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish, provider: jms, capability_version: \">=1.0\"}\n" +
				"    request: {destination: d}\n"
			if src == "revocable" {
				wf += "    max_stale: 30s\n"
			}
			if _, err := o.Upload(context.Background(), []byte(wf)); err != nil {
				t.Fatal(err)
			}
			if _, err := o.Publish(src); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	plain := newOrch(nil, 0)
	withStatic := newOrch([]orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: e.jms.Registration().Endpoint}}, 0)
	bounded := newOrch(nil, 10*time.Minute)
	run := func(o *orchestrator.Orchestrator, wf string) apiv1.StepRun {
		t.Helper()
		r, err := o.RunNow(context.Background(), wf, "http", nil)
		if err != nil || r == nil || len(r.Steps) == 0 {
			t.Fatalf("run %s: %+v %v", wf, r, err)
		}
		return r.Steps[0]
	}
	for _, o := range []*orchestrator.Orchestrator{plain, withStatic, bounded} {
		for _, wf := range []string{"default", "revocable"} {
			if st := run(o, wf); st.Status != apiv1.RunSucceeded || st.Source != orchestrator.SourceRegistry {
				t.Fatalf("%s with the registry up: %+v", wf, st)
			}
		}
	}
	down.Store(true)
	advance(31 * time.Second)
	if st := run(plain, "revocable"); st.Error == nil || st.Error.Code != apiv1.CodeStaleViewExpired {
		t.Errorf("a step with max_stale 30s, 31 s into the outage: %+v, want %s", st, apiv1.CodeStaleViewExpired)
	}
	if st := run(withStatic, "revocable"); st.Status != apiv1.RunSucceeded || st.Source != orchestrator.SourceStatic {
		t.Errorf("the same step with a static capability: %+v, want it run on the static entry", st)
	}
	advance(11*time.Minute - 31*time.Second)
	if st := run(plain, "default"); st.Status != apiv1.RunSucceeded || st.Source != orchestrator.SourceSnapshot {
		t.Errorf("a step declaring nothing 11 min into the outage: %+v, want it run from the last-known-good view", st)
	}
	if st := run(bounded, "default"); st.Error == nil || st.Error.Code != apiv1.CodeStaleViewExpired {
		t.Errorf("with --max-stale 10m, 11 min into the outage: %+v, want %s", st, apiv1.CodeStaleViewExpired)
	}
	down.Store(false)
	advance(time.Second) // the discovery client asks a failed registry again a RetryInterval apart
	if st := run(plain, "revocable"); st.Status != apiv1.RunSucceeded || st.Source != orchestrator.SourceRegistry {
		t.Errorf("the revocable step once the registry is back: %+v, want it run from the registry", st)
	}
}

// TestRedirectsAreNeverFollowed: a provider answering 307 to another address gets neither
// the step's invocation nor its validation call re-sent there; the step fails naming the
// Location, and the validation says the provider redirected.
func TestRedirectsAreNeverFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		io.WriteString(w, `{"output":{"stolen":true},"valid":true}`)
	}))
	t.Cleanup(other.Close)
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(prov.Close)
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc,
		Static: []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: prov.URL,
			Metadata: json.RawMessage(`{"validate_supported":true}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	src := "name: redir\ninvocation:\n  type: [http]\nvalidation:\n  provider_strict: false\nsteps:\n" +
		"  - id: s\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish, provider: jms, capability_version: \">=1.0\"}\n" +
		"    request: {destination: d, payload: {secret: 1}}\n"
	if _, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatal(err)
	}
	o.Publish("redir")
	rec, err := o.RunNow(context.Background(), "redir", "http", nil)
	if err != nil || rec == nil || len(rec.Steps) == 0 {
		t.Fatalf("run: %+v %v", rec, err)
	}
	if st := rec.Steps[0]; st.Status != apiv1.RunFailed || st.Error == nil || !strings.Contains(st.Error.Message, other.URL) || !strings.Contains(st.Error.Message, "never followed") {
		t.Errorf("the step against a redirecting provider: %+v, want it failed naming the Location", st)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d requests reached the address the provider redirected to, want none", n)
	}
}

// TestScheduledRevalidation: RevalidatePublished validates every published workflow again
// against its providers; a provider whose validation starts failing under a published
// workflow changes its verdict, which raises the workflow's validation incident, and
// passing again clears it.
func TestScheduledRevalidation(t *testing.T) {
	var failing atomic.Bool
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if failing.Load() {
			io.WriteString(w, `{"valid":false,"diagnostics":[{"severity":"error","code":"DESTINATION_GONE","message":"the destination was removed","path":"request.destination"}]}`)
			return
		}
		io.WriteString(w, `{"valid":true}`)
	}))
	t.Cleanup(prov.Close)
	reg := registrytest.NewServer(t, registry.Config{})
	reg.Clock.Advance(registry.DefaultLeaseTTL)
	req := apiv1.RegisterRequest{InstanceID: "toggle-1", ServiceName: "toggle", ServiceVersion: "1.0.0", Endpoint: prov.URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "toggle.send", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "toggle",
			Metadata: json.RawMessage(`{"validate_supported":true}`)}}}
	if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	disc, _ := discovery.New(discovery.Config{Registries: []string{reg.URL}, RequestTimeout: time.Second, TTL: time.Millisecond})
	var mu sync.Mutex
	var conds []apiv1.Condition
	rep, err := report.New(report.Config{Reporter: "o", Send: func(_ context.Context, r *apiv1.ReportRequest) error {
		mu.Lock()
		conds = append(conds, r.Conditions...)
		mu.Unlock()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Reporter: rep, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	src := "name: send\ninvocation:\n  type: [http]\nsteps:\n  - id: s\n    type: service_call\n    step_version: \"1.1\"\n" +
		"    capability: {id: toggle.send, provider: toggle, capability_version: \">=1.0\"}\n    request: {destination: d}\n"
	if _, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Publish("send"); err != nil {
		t.Fatal(err)
	}
	if changed := o.RevalidatePublished(context.Background()); len(changed) != 0 {
		t.Errorf("nothing changed, yet %v", changed)
	}
	failing.Store(true)
	if changed := o.RevalidatePublished(context.Background()); fmt.Sprint(changed) != "[send]" {
		t.Errorf("the provider fails validation now: changed %v, want [send]", changed)
	}
	rep.Flush(context.Background())
	failing.Store(false)
	o.RevalidatePublished(context.Background())
	rep.Flush(context.Background())
	mu.Lock()
	defer mu.Unlock()
	var states []bool
	for _, c := range conds {
		if c.Kind == apiv1.IncidentValidation && c.Subject == "send" {
			states = append(states, c.Active)
		}
	}
	if fmt.Sprint(states) != "[true false]" {
		t.Errorf("validation conditions reported: %v, want the incident raised then cleared", states)
	}
}
