package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/workflow"
)

// run uploads, publishes and runs src (a workflow body under steps:, in mode) with input,
// on an orchestrator whose parallel steps run one branch at a time (branch order: what a
// legacy branch sees of its siblings is then deterministic).
func runScoped(t *testing.T, e *env, o *orchestrator.Orchestrator, name, mode, steps, input string) *apiv1.Run {
	t.Helper()
	src := fmt.Sprintf("name: %s\nscope: %s\ninvocation: {type: http}\nvalidation: {provider_strict: false}\nsteps:\n%s", name, mode, steps)
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("upload %s: %v\n%s", name, err, diagnostics(r))
	}
	if _, err := o.Publish(name); err != nil {
		t.Fatal(err)
	}
	run, err := o.RunNow(context.Background(), name, "http", json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func diagnostics(r *apiv1.ValidationResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, s := range r.Steps {
		for _, d := range s.Contract.Diagnostics {
			fmt.Fprintf(&b, "%d:%d %s %s %s\n", d.Line, d.Column, d.Severity, d.Code, d.Message)
		}
	}
	for _, d := range r.Diagnostics {
		fmt.Fprintf(&b, "%d:%d %s %s %s\n", d.Line, d.Column, d.Severity, d.Code, d.Message)
	}
	return b.String()
}

func serialOrchestrator(t *testing.T, e *env) *orchestrator.Orchestrator {
	t.Helper()
	o, err := orchestrator.New(orchestrator.Config{Discovery: e.disc, Strict: true, MaxParallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

const loopSteps = `  - id: each_order
    type: loop
    for_each: "${input.orders}"
    export_context_keys: [last_message]
    steps:
      - id: publish_one
        type: service_call
        step_version: "1.1"
        capability: {id: messaging.publish, provider: jms}
        request: {destination: orders.loop, payload: "${loop.item}"}
        output: last_message
      - id: remember
        type: set
        set: {scratch: "${loop.item.id}", seen: "${loop.index}"}
`

// TestLoopScopes: a strict loop exports only export_context_keys; legacy lets every write
// through. Each iteration publishes its order to the real jms provider.
func TestLoopScopes(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		wantKeys []string
	}{
		{"strict", []string{"last_message"}},
		{"legacy", []string{"last_message", "scratch", "seen"}},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			e := newEnv(t, nil, "")
			run := runScoped(t, e, serialOrchestrator(t, e), "loop-"+tt.mode, tt.mode, loopSteps, `{"orders": [{"id": 1}, {"id": 2}, {"id": 3}]}`)
			if run.Status != apiv1.RunSucceeded || len(run.Steps) != 1 || len(run.Steps[0].Iterations) != 3 {
				t.Fatalf("run = %s", jsonOf(run))
			}
			if got := keys(run.Context); !cmp.Equal(got, tt.wantKeys) {
				t.Errorf("final context keys = %v, want %v (context %v)", got, tt.wantKeys, run.Context)
			}
			if lm, _ := run.Context["last_message"].(map[string]any); lm["message_id"] != "jms-3" {
				t.Errorf("last_message = %v, want the third publication", run.Context["last_message"])
			}
			if msgs := e.jms.Messages("orders.loop"); len(msgs) != 3 || string(msgs[1].Payload) != `{"id":2}` {
				t.Errorf("jms got %+v", msgs)
			}
		})
	}
}

// TestFailedIterationExportsNothing: the second iteration fails (a reference to a missing
// path); in strict mode what it wrote never reaches the parent, the first one's export stays.
func TestFailedIterationExportsNothing(t *testing.T) {
	steps := `  - id: each
    type: loop
    for_each: "${input.items}"
    export_context_keys: [last]
    steps:
      - id: note
        type: set
        set: {last: "${loop.item.id}"}
      - id: check
        type: set
        set: {ok: "${loop.item.ok}"}
`
	for _, tt := range []struct {
		mode string
		want any
	}{{"strict", float64(1)}, {"legacy", float64(2)}} {
		t.Run(tt.mode, func(t *testing.T) {
			e := newEnv(t, nil, "")
			run := runScoped(t, e, serialOrchestrator(t, e), "fail-"+tt.mode, tt.mode, steps, `{"items": [{"id": 1, "ok": true}, {"id": 2}]}`)
			if run.Status != apiv1.RunFailed || run.Steps[0].Iterations[1].Status != apiv1.RunFailed ||
				run.Steps[0].Iterations[1].Steps[1].Error.Code != "REFERENCE_NOT_FOUND" {
				t.Fatalf("run = %s", jsonOf(run))
			}
			if run.Context["last"] != tt.want {
				t.Errorf("last = %v, want %v", run.Context["last"], tt.want)
			}
		})
	}
}

const parallelSteps = `  - id: init
    type: set
    set: {shared: {v: 0}}
  - id: fan_out
    type: parallel
    branches:
      - id: to_jms
        steps:
          - id: overwrite
            type: set
            set: {shared: {v: 1}}
          - id: jms
            type: service_call
            step_version: "1.1"
            capability: {id: messaging.publish, provider: jms}
            request: {destination: orders.fan, payload: "${context.shared}"}
            output: message_id
      - id: to_rabbitmq
        steps:
          - id: rabbit
            type: service_call
            step_version: "1.1"
            capability: {id: messaging.publish, provider: rabbitmq}
            request: {destination: orders.fan, payload: "${context.shared}"}
            output: message_id
    outputs_map:
      jms_id: {branch: to_jms, key: message_id}
      all_ids: {key: message_id, aggregate: collect}
`

// TestParallelScopes: in strict mode a branch runs on a snapshot — the rabbitmq branch does
// not see the jms branch's overwrite, though it runs after it — and the parent receives only
// outputs_map; in legacy mode the write is shared.
func TestParallelScopes(t *testing.T) {
	for _, tt := range []struct {
		mode       string
		rabbitSaw  string
		wantKeys   []string
		wantAllIDs any
	}{
		{"strict", `{"v":0}`, []string{"all_ids", "jms_id", "shared"}, []any{"jms-1", "rabbitmq-1"}},
		{"legacy", `{"v":1}`, []string{"message_id", "shared"}, nil},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			e := newEnv(t, nil, "")
			run := runScoped(t, e, serialOrchestrator(t, e), "fan-"+tt.mode, tt.mode, parallelSteps, `{}`)
			if run.Status != apiv1.RunSucceeded || len(run.Steps[1].Branches) != 2 {
				t.Fatalf("run = %s", jsonOf(run))
			}
			if msgs := e.rmq.Messages("orders.fan"); len(msgs) != 1 || string(msgs[0].Payload) != tt.rabbitSaw {
				t.Errorf("the rabbitmq branch published %+v, want payload %s", msgs, tt.rabbitSaw)
			}
			if got := keys(run.Context); !cmp.Equal(got, tt.wantKeys) {
				t.Errorf("final context keys = %v, want %v", got, tt.wantKeys)
			}
			if got := messageIDs(run.Context["all_ids"]); !cmp.Equal(got, tt.wantAllIDs) {
				t.Errorf("all_ids = %v, want %v", run.Context["all_ids"], tt.wantAllIDs)
			}
		})
	}
}

// TestFailedBranchMapsNothing: a failing branch cancels the others and, in strict mode,
// nothing of the parallel step reaches the parent.
func TestFailedBranchMapsNothing(t *testing.T) {
	steps := `  - id: fan_out
    type: parallel
    branches:
      - id: good
        steps:
          - {id: a, type: set, set: {k: 1}}
      - id: bad
        steps:
          - {id: b, type: set, set: {k: "${input.missing}"}}
    outputs_map:
      k: {branch: good, key: k}
`
	e := newEnv(t, nil, "")
	run := runScoped(t, e, serialOrchestrator(t, e), "fanfail", "strict", steps, `{}`)
	if run.Status != apiv1.RunFailed || run.Steps[0].Branches[1].Status != apiv1.RunFailed {
		t.Fatalf("run = %s", jsonOf(run))
	}
	if _, ok := run.Context["k"]; ok {
		t.Errorf("a failed parallel step mapped k into the parent: %v", run.Context)
	}
}

// messageIDs reduces published results to their ids for comparison.
func messageIDs(v any) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	out := make([]any, len(l))
	for i, x := range l {
		if m, ok := x.(map[string]any); ok {
			out[i] = m["message_id"]
		} else {
			out[i] = x
		}
	}
	return out
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func jsonOf(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// setOnly builds an orchestrator (no registry needed) with the published workflow src.
func setOnly(b *testing.B, name, src string) *orchestrator.Orchestrator {
	b.Helper()
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, ScopeMode: workflow.ModeStrict})
	if err != nil {
		b.Fatal(err)
	}
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		b.Fatalf("%v\n%s", err, diagnostics(r))
	}
	if _, err := o.Publish(name); err != nil {
		b.Fatal(err)
	}
	return o
}

// BenchmarkSetStep: the orchestrator's cost of one executed set step (a run of 100 of them,
// each writing a key from the input). Target: at most 5 µs a step.
func BenchmarkSetStep(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("name: sets\ninvocation: {type: http}\nsteps:\n")
	for i := range 100 {
		fmt.Fprintf(&sb, "  - {id: s%d, type: set, set: {k%d: \"${input.v}\"}}\n", i, i)
	}
	o := setOnly(b, "sets", sb.String())
	b.ReportAllocs()
	for b.Loop() {
		if r, err := o.RunNow(context.Background(), "sets", "http", json.RawMessage(`{"v": 1}`)); err != nil || r.Status != apiv1.RunSucceeded {
			b.Fatal(err, r.Status)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/step")
}

// BenchmarkLoop10000: a strict loop of 10,000 iterations of one set step. Target: at most
// 100 ms a run.
func BenchmarkLoop10000(b *testing.B) {
	o := setOnly(b, "loop", "name: loop\ninvocation: {type: http}\nsteps:\n  - id: each\n    type: loop\n    for_each: \"${input.items}\"\n"+
		"    max_iterations: 10000\n    export_context_keys: [last]\n    steps:\n      - {id: note, type: set, set: {last: \"${loop.item}\"}}\n")
	items := make([]int, 10000)
	for i := range items {
		items[i] = i
	}
	input, _ := json.Marshal(map[string]any{"items": items})
	b.ReportAllocs()
	for b.Loop() {
		if r, err := o.RunNow(context.Background(), "loop", "http", input); err != nil || r.Status != apiv1.RunSucceeded || r.Context["last"] != float64(9999) {
			b.Fatal(err, r.Status, r.Context["last"])
		}
	}
}

// TestOrderBatchExample runs the strict example workflow of meshflows dev against the real
// example providers: each order to jms in the loop, the announcement to both at once, and
// only the exported and mapped keys in the final context.
func TestOrderBatchExample(t *testing.T) {
	e := newEnv(t, nil, "")
	if r, err := e.o.Upload(context.Background(), workflows.OrderBatch); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	if _, err := e.o.Publish("order-batch"); err != nil {
		t.Fatal(err)
	}
	run, err := e.o.RunNow(context.Background(), "order-batch", "http", json.RawMessage(`{"batch": "b7", "orders": [{"id": 1}, {"id": 2}, {"id": 3}]}`))
	if err != nil || run.Status != apiv1.RunSucceeded {
		t.Fatalf("run = %v %s", err, jsonOf(run))
	}
	if got := keys(run.Context); !cmp.Equal(got, []string{"announcements", "batch", "count", "last_message"}) {
		t.Errorf("final context keys = %v", got)
	}
	if got := messageIDs(run.Context["announcements"]); !cmp.Equal(got, []any{"jms-4", "rabbitmq-1"}) {
		t.Errorf("announcements = %v", got)
	}
	if n := len(e.jms.Messages("orders.events")); n != 3 {
		t.Errorf("jms got %d orders, want 3", n)
	}
	if n := len(e.rmq.Messages("batches.b7")); n != 1 {
		t.Errorf("rabbitmq got %d announcements, want 1", n)
	}
}

// TestWorkflowLifecycle over HTTP: a new upload is a new revision and leaves the published
// one running until it is published; DELETE removes the workflow; a run can be fetched by
// id; revisions survive a restart from --workflows-dir.
func TestWorkflowLifecycle(t *testing.T) {
	e := newEnv(t, nil, "")
	v := func(dest string) string {
		return "name: life\ninvocation: {type: http}\nvalidation: {provider_strict: false}\nsteps:\n" +
			"  - {id: pub, type: service_call, capability: {id: messaging.publish, provider: jms}, request: {destination: " + dest + "}}\n"
	}
	mustStatus := func(want int, method, path, body string) map[string]any {
		t.Helper()
		code, out := e.do(t, method, path, body)
		if code != want {
			t.Fatalf("%s %s = %d %v, want %d", method, path, code, out, want)
		}
		return out
	}
	mustStatus(201, "POST", "/v1/workflows", v("first"))
	mustStatus(200, "POST", "/v1/workflows/life/publish", "")
	mustStatus(201, "POST", "/v1/workflows", v("second"))
	det := mustStatus(200, "GET", "/v1/workflows/life", "")
	if det["revision"] != float64(2) || det["published_revision"] != float64(1) || !strings.Contains(det["yaml"].(string), "second") {
		t.Fatalf("detail after the second upload = %v", det)
	}
	run := mustStatus(200, "POST", "/v1/workflows/life/run", "{}")
	if n := len(e.jms.Messages("first")); n != 1 || len(e.jms.Messages("second")) != 0 {
		t.Errorf("the run before publishing revision 2 did not run revision 1 (first: %d)", n)
	}
	got := mustStatus(200, "GET", "/v1/workflows/life/runs/"+run["run_id"].(string), "")
	if got["run_id"] != run["run_id"] || got["status"] != "succeeded" {
		t.Errorf("GET run = %v", got)
	}
	mustStatus(404, "GET", "/v1/workflows/life/runs/run-none", "")
	mustStatus(200, "POST", "/v1/workflows/life/publish", "")
	mustStatus(200, "POST", "/v1/workflows/life/run", "{}")
	if len(e.jms.Messages("second")) != 1 {
		t.Error("after publishing revision 2 the run did not run it")
	}
	mustStatus(201, "POST", "/v1/workflows", v("third")) // revision 3, revision 2 published

	// A restart from the same directory keeps both revisions.
	o2, err := orchestrator.New(orchestrator.Config{Discovery: e.disc, Dir: e.dir, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d, _ := o2.Get("life"); d.Revision != 3 || d.PublishedRevision != 2 || !strings.Contains(d.YAML, "third") {
		t.Errorf("after a restart: revision %d, published %d", d.Revision, d.PublishedRevision)
	}
	if _, err := o2.RunNow(context.Background(), "life", "http", nil); err != nil || len(e.jms.Messages("second")) != 2 {
		t.Errorf("after a restart the published revision 2 did not run: %v", err)
	}

	code, out := e.do(t, "PATCH", "/v1/workflows/life", "")
	if code != 405 {
		t.Errorf("PATCH a workflow = %d %v, want 405", code, out)
	}
	mustStatus(200, "DELETE", "/v1/workflows/life", "")
	mustStatus(404, "GET", "/v1/workflows/life", "")
	mustStatus(404, "DELETE", "/v1/workflows/life", "")
	if files, _ := filepath.Glob(filepath.Join(e.dir, "life*")); len(files) != 0 {
		t.Errorf("files left after DELETE: %v", files)
	}
}

// TestLoopBadInputAtRunTime: what only a run can find fails the loop step with a reason,
// never a hang or a panic.
func TestLoopBadInputAtRunTime(t *testing.T) {
	steps := `  - id: each
    type: loop
    for_each: "${input.items}"
    max_iterations: 3
    steps:
      - {id: note, type: set, set: {v: "${loop.item}"}}
`
	e := newEnv(t, nil, "")
	o := serialOrchestrator(t, e)
	src := "name: bad-loop\ninvocation: {type: http}\nsteps:\n" + steps
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	o.Publish("bad-loop")
	for _, tt := range []struct {
		name, input, code, message string
	}{
		{"not a list", `{"items": "abc"}`, apiv1.CodeInvalidRequest, "for_each is not a list at run time (got a string)"},
		{"too long", `{"items": [1, 2, 3, 4]}`, apiv1.CodeInvalidRequest, "more than max_iterations 3"},
		{"missing", `{}`, "REFERENCE_NOT_FOUND", "${input.items}: no such path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			run, err := o.RunNow(context.Background(), "bad-loop", "http", json.RawMessage(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			sr := run.Steps[0]
			if run.Status != apiv1.RunFailed || sr.Error == nil || sr.Error.Code != tt.code || !strings.Contains(sr.Error.Message, tt.message) || len(sr.Iterations) != 0 {
				t.Errorf("run = %s, want the loop failed with %s %q", jsonOf(run), tt.code, tt.message)
			}
		})
	}
}

// TestFailingBranchCancelsTheOthers: a branch that fails cancels a sibling still waiting on
// its provider, through the context; the run ends at once with the sibling cancelled.
func TestFailingBranchCancelsTheOthers(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case !strings.HasSuffix(r.URL.Path, "/invoke"):
		case strings.Contains(string(body), `"destination":"slow"`):
			once.Do(func() { close(started) })
			<-r.Context().Done() // until the orchestrator gives up
		default: // the failing branch fails once the slow one is in flight
			select {
			case <-started:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(slow.Close)
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, ProviderTimeout: 100 * time.Millisecond,
		Static: []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: slow.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	call := "{id: %s, type: service_call, capability: {id: messaging.publish, provider: jms}, request: {destination: %s}, timeout: 60s}"
	src := "name: race\ninvocation: {type: http}\nvalidation: {provider_strict: false}\nsteps:\n  - id: fan\n    type: parallel\n    branches:\n" +
		"      - id: waits\n        steps:\n          - " + fmt.Sprintf(call, "slow_call", "slow") + "\n" +
		"      - id: fails\n        steps:\n          - " + fmt.Sprintf(call, "bad_call", "fail") + "\n"
	if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	o.Publish("race")
	done := make(chan *apiv1.Run, 1)
	go func() {
		run, _ := o.RunNow(context.Background(), "race", "http", json.RawMessage(`{}`))
		done <- run
	}()
	var run *apiv1.Run
	select {
	case run = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end: the failing branch did not cancel its sibling")
	}
	br := run.Steps[0].Branches
	if run.Status != apiv1.RunFailed || br[0].Status != apiv1.StepCancelled || br[1].Status != apiv1.RunFailed {
		t.Errorf("run = %s, want the waiting branch cancelled and the other failed", jsonOf(run))
	}
}
