package orchestrator_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/examples/providers/rabbitmq"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/prober"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/report"
)

type env struct {
	reg  *registrytest.Server
	o    *orchestrator.Orchestrator
	srv  *httptest.Server
	jms  *messaging.Provider
	rmq  *messaging.Provider
	dir  string
	disc *discovery.Client
	prom *prometheus.Registry
}

// serveProvider serves the provider build makes on a listener whose address it was built
// for, until the test ends or the server is closed.
func serveProvider(t *testing.T, build func(endpoint string) (*messaging.Provider, error)) (*messaging.Provider, *http.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := build("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p, srv
}

func newEnv(t *testing.T, static []orchestrator.StaticCapability, registryURL string) *env {
	t.Helper()
	return newEnvWith(t, static, registryURL, registry.Config{})
}

// newEnvWith is newEnv with the registry's configuration.
func newEnvWith(t *testing.T, static []orchestrator.StaticCapability, registryURL string, rcfg registry.Config) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), prom: prometheus.NewRegistry()}
	e.reg = registrytest.NewServer(t, rcfg)
	e.reg.Clock.Advance(registry.DefaultLeaseTTL)
	e.jms, _ = serveProvider(t, func(ep string) (*messaging.Provider, error) { return jms.New(ep, "") })
	e.rmq, _ = serveProvider(t, func(ep string) (*messaging.Provider, error) { return rabbitmq.New(ep, "") })
	for _, p := range []*messaging.Provider{e.jms, e.rmq} {
		req := p.Registration()
		if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}
	if registryURL == "" {
		registryURL = e.reg.URL
	}
	e.disc, _ = discovery.New(discovery.Config{Registries: []string{registryURL}, RequestTimeout: time.Second})
	o, err := orchestrator.New(orchestrator.Config{Discovery: e.disc, Static: static, Dir: e.dir, Strict: true, Registerer: e.prom})
	if err != nil {
		t.Fatal(err)
	}
	e.o = o
	e.srv = httptest.NewServer(o.Handler())
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func TestUploadPublishRun(t *testing.T) {
	e := newEnv(t, nil, "")
	code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderPublish))
	if code != 201 || body["contract_status"] != "passed" || body["provider_status"] != "warning" {
		t.Fatalf("upload = %d %v", code, body)
	}
	if code, _ := e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 7}`); code != 400 {
		t.Errorf("run before publish = %d, want 400", code)
	}
	if code, body := e.do(t, "POST", "/v1/workflows/order-publish/publish", ""); code != 200 {
		t.Fatalf("publish = %d %v", code, body)
	}
	code, run := e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 7}`)
	if code != 200 || run["status"] != "succeeded" {
		t.Fatalf("run = %d %v", code, run)
	}
	if msgs := e.rmq.Messages("orders.mirror"); len(msgs) != 1 || string(msgs[0].Payload) != `{"order":7}` {
		t.Errorf("rabbitmq got %+v", msgs)
	}
	if msgs := e.jms.Messages("orders.events"); len(msgs) != 1 || msgs[0].Headers["content-type"] != "application/json" {
		t.Errorf("jms got %+v", msgs)
	}
	code, hist := e.do(t, "GET", "/v1/workflows/order-publish/runs", "")
	if code != 200 || hist["success_rate"] != 1.0 || len(hist["runs"].([]any)) != 1 {
		t.Errorf("runs = %d %v", code, hist)
	}
	code, list := e.do(t, "GET", "/v1/workflows", "")
	if code != 200 || len(list["workflows"].([]any)) != 1 {
		t.Errorf("list = %v", list)
	}
	if code, _ := e.do(t, "GET", "/v1/workflows/order-publish/validation", ""); code != 200 {
		t.Errorf("validation = %d", code)
	}
	if code, _ := e.do(t, "POST", "/v1/workflows/order-publish/validate", ""); code != 200 {
		t.Errorf("re-validate = %d", code)
	}
	if code, _ := e.do(t, "DELETE", "/v1/discovery/invalidate", ""); code != 200 {
		t.Errorf("invalidate = %d", code)
	}
	runs := `
# HELP meshflows_orchestrator_runs_total Workflow runs finished, by workflow and status (succeeded, failed, cancelled).
# TYPE meshflows_orchestrator_runs_total counter
meshflows_orchestrator_runs_total{status="succeeded",workflow="order-publish"} 1
`
	if err := testutil.GatherAndCompare(e.prom, strings.NewReader(runs), "meshflows_orchestrator_runs_total"); err != nil {
		t.Error(err)
	}
	// the upload and the re-validation were timed, both passed the contract
	counts := histogramCounts(t, e.prom, "meshflows_orchestrator_validation_duration_seconds", "contract_status")
	if counts["passed"] < 2 || counts["failed"] != 0 {
		t.Errorf("validations observed by contract status = %v, want passed ≥ 2, failed 0", counts)
	}
	// each validation asked both providers
	if c := histogramCounts(t, e.prom, "meshflows_orchestrator_provider_validation_duration_seconds", "provider"); c["jms"] < 2 || c["rabbitmq"] < 2 {
		t.Errorf("provider validations observed = %v, want ≥ 2 for jms and for rabbitmq", c)
	}
	if c := histogramCounts(t, e.prom, "meshflows_orchestrator_run_duration_seconds", "workflow"); c["order-publish"] != 1 {
		t.Errorf("run durations observed = %v, want one for order-publish", c)
	}
	// persisted: a new orchestrator on the same dir loads it published
	o2, _ := orchestrator.New(orchestrator.Config{Discovery: e.disc, Dir: e.dir, Strict: true})
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := o2.List(); len(l) != 1 || !l[0].Published {
		t.Errorf("after Load: %+v", l)
	}
}

func TestBlockedUploads(t *testing.T) {
	e := newEnv(t, nil, "")
	bad := strings.Replace(string(workflows.OrderPublish), "id: publish_jms", "id: 1bad", 1)
	code, body := e.do(t, "POST", "/v1/workflows", bad)
	errBody, _ := body["error"].(map[string]any)
	if code != 422 || errBody["code"] != "VALIDATION_FAILED" || body["validation"] == nil {
		t.Fatalf("contract error upload = %d %v", code, body)
	}
	// strict provider validation blocks a step the provider rejects
	strict := strings.Replace(string(workflows.OrderPublish), "provider_strict: false", "provider_strict: true", 1)
	strict = strings.Replace(strict, "destination: orders.events", `destination: ""`, 1)
	if code, body := e.do(t, "POST", "/v1/workflows", strict); code != 422 {
		t.Errorf("strict rejected upload = %d %v", code, body)
	}
	nonStrict := strings.Replace(string(workflows.OrderPublish), "destination: orders.events", `destination: ""`, 1)
	if code, body := e.do(t, "POST", "/v1/workflows", nonStrict); code != 201 || body["provider_status"] != "warning" {
		t.Errorf("non-strict upload = %d %v", code, body)
	}
	if code, _ := e.do(t, "GET", "/v1/workflows/nope", ""); code != 404 {
		t.Errorf("unknown workflow = %d", code)
	}
}

func TestStaticFallbackWhenTheRegistryNeverAnswered(t *testing.T) {
	// providers serve, but the orchestrator's registry never answers
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	e := newEnv(t, nil, dead.URL)
	static := []orchestrator.StaticCapability{
		{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: e.jms.Registration().Endpoint},
		{CapabilityID: "messaging.publish", Provider: "rabbitmq", Version: "1.0.0", Endpoint: e.rmq.Registration().Endpoint},
	}
	o, _ := orchestrator.New(orchestrator.Config{Discovery: e.disc, Static: static, Strict: true})
	if _, err := o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatalf("upload with the registry down (contract only, DISCOVERY_UNAVAILABLE warns): %v", err)
	}
	if _, err := o.Publish("order-publish"); err != nil {
		t.Fatal(err)
	}
	run, err := o.RunNow(context.Background(), "order-publish", "http", json.RawMessage(`{"order":1}`))
	if err != nil || run.Status != "succeeded" || !strings.HasPrefix(run.Steps[0].InstanceID, "static-") {
		t.Fatalf("run = %+v, %v", run, err)
	}
}

func TestFailoverAndStepErrors(t *testing.T) {
	e := newEnv(t, nil, "")
	// a dead jms instance with a higher priority is tried first, then the live one
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	ghost := apiv1.RegisterRequest{InstanceID: "ghost", ServiceName: "egress-jms", ServiceVersion: "0.1.3", Endpoint: dead.URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0",
			Provider: "jms", Metadata: json.RawMessage(`{"priority": 10}`)}}}
	if _, err := e.reg.Registry.Register(context.Background(), &ghost); err != nil {
		t.Fatal(err)
	}
	if _, err := e.o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatal(err)
	}
	e.o.Publish("order-publish")
	run, err := e.o.RunNow(context.Background(), "order-publish", "http", json.RawMessage(`{"order":2}`))
	if err != nil || run.Status != "succeeded" || run.Steps[0].InstanceID == "ghost" {
		t.Fatalf("failover run = %+v, %v", run, err)
	}
	// a provider error stops the run: later steps are skipped
	bad := strings.Replace(string(workflows.OrderPublish), "destination: orders.events", `destination: " "`, 1)
	if _, err := e.o.Upload(context.Background(), []byte(bad)); err != nil {
		t.Fatal(err)
	}
	e.o.Publish("order-publish")
	run, _ = e.o.RunNow(context.Background(), "order-publish", "http", nil)
	if run.Status != "failed" || run.Steps[0].Status != "failed" || run.Steps[0].Error == nil || run.Steps[1].Status != "skipped" {
		t.Fatalf("failing run = %+v", run)
	}
	h, _ := e.o.Runs("order-publish")
	if len(h.Runs) != 2 || h.SuccessRate != 0.5 {
		t.Errorf("history = %+v", h)
	}
}

func TestScheduledRuns(t *testing.T) {
	e := newEnv(t, nil, "")
	src := strings.Replace(string(workflows.OrderPublish), "  type: http\n", "  type: [http, schedule]\n  schedule: \"@every 1s\"\n", 1)
	if _, err := e.o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatal(err)
	}
	e.o.Publish("order-publish")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.o.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h, _ := e.o.Runs("order-publish")
		if len(h.Runs) > 0 && h.Runs[0].Status != apiv1.RunRunning { // a run in progress is listed first
			if h.Runs[0].Trigger != "schedule" || h.Runs[0].Status != "succeeded" {
				t.Errorf("scheduled run = %+v", h.Runs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no scheduled run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
}

// histogramCounts returns the sample counts of a histogram summed by the values of one label.
func histogramCounts(t *testing.T, reg *prometheus.Registry, name, label string) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// TestPanicIsJudgedPerStep: the jms provider is admitted and the rabbitmq one still unknown —
// exactly half of messaging.publish in rotation, so the registry's group is not in panic — but
// the step pinned to provider rabbitmq has none of its candidates in rotation: it uses them
// all instead of failing with no instance.
func TestPanicIsJudgedPerStep(t *testing.T) {
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, nil, "", registry.Config{Eligibility: m})
	jmsReg := e.jms.Registration()
	in, _ := e.reg.Registry.Instance(jmsReg.InstanceID)
	for range 2 { // two ok probes admit it
		e.reg.Registry.ReportProbe(prober.Result{Target: prober.Target{ID: in.InstanceID, Generation: in.Generation}, At: e.reg.Clock.Now(), Result: health.ProbeOK})
	}
	rmqReg := e.rmq.Registration()
	if ex, _ := e.reg.Registry.Explain(rmqReg.InstanceID); ex.State != apiv1.EligibilityUnknown {
		t.Fatalf("rabbitmq is %s, want unknown", ex.State)
	}
	if ex, _ := e.reg.Registry.Explain(jmsReg.InstanceID); !apiv1.InRotation(ex.State) {
		t.Fatalf("jms is %s, want in rotation", ex.State)
	}
	if code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderPublish)); code != 201 {
		t.Fatalf("upload = %d %v", code, body)
	}
	e.do(t, "POST", "/v1/workflows/order-publish/publish", "")
	code, run := e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 8}`)
	if code != 200 || run["status"] != "succeeded" {
		t.Fatalf("run = %d %v", code, run)
	}
	if msgs := e.rmq.Messages("orders.mirror"); len(msgs) != 1 {
		t.Errorf("rabbitmq got %+v, want the mirrored order", msgs)
	}
}

// TestDiscoveryViewSurvivesARestart: an orchestrator restarted while the registry is away
// resolves its steps from the views it saved, and the run succeeds.
func TestDiscoveryViewSurvivesARestart(t *testing.T) {
	e := newEnv(t, nil, "")
	if code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderPublish)); code != 201 {
		t.Fatalf("upload = %d %v", code, body)
	}
	e.do(t, "POST", "/v1/workflows/order-publish/publish", "")
	if code, run := e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 1}`); code != 200 || run["status"] != "succeeded" {
		t.Fatalf("run = %d %v", code, run)
	}
	// the registry goes away; the orchestrator restarts on the same dir
	e.reg.Close()
	disc, _ := discovery.New(discovery.Config{Registries: []string{e.reg.URL}, RequestTimeout: time.Second})
	o2, err := orchestrator.New(orchestrator.Config{Discovery: disc, Dir: e.dir, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run, err := o2.RunNow(context.Background(), "order-publish", "test", []byte(`{"order": 2}`))
	if err != nil || run.Status != "succeeded" {
		t.Fatalf("run after the restart, registry away: %+v %v", run, err)
	}
	if msgs := e.rmq.Messages("orders.mirror"); len(msgs) != 2 {
		t.Errorf("rabbitmq got %d mirrored orders, want 2", len(msgs))
	}
}

// refuseAll is an Authorizer that refuses every request and remembers what it was asked.
type refuseAll struct {
	mu    sync.Mutex
	asked []string
}

func (a *refuseAll) Authorize(_ *http.Request, perm string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, perm)
	return "", apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "not you")
}

// TestEveryEndpointNeedsItsPermission: with an Authorizer, every API endpoint but /healthz
// asks it first, for the permission its verb names, and a refusal leaves nothing done.
func TestEveryEndpointNeedsItsPermission(t *testing.T) {
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	authz := &refuseAll{}
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Dir: t.TempDir(), Authorizer: authz})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(o.Handler())
	t.Cleanup(srv.Close)
	tests := []struct {
		method, path, body string
		want               string // the permission asked; "" for none
	}{
		{"POST", "/v1/workflows", string(workflows.OrderPublish), auth.WorkflowsWrite},
		{"GET", "/v1/workflows", "", auth.WorkflowsRead},
		{"GET", "/v1/workflows/order-publish", "", auth.WorkflowsRead},
		{"GET", "/v1/workflows/order-publish/validation", "", auth.WorkflowsRead},
		{"POST", "/v1/workflows/order-publish/validate", "", auth.WorkflowsWrite},
		{"POST", "/v1/workflows/order-publish/publish", "", auth.WorkflowsWrite},
		{"POST", "/v1/workflows/order-publish/run", "{}", auth.WorkflowsRun},
		{"GET", "/v1/workflows/order-publish/runs", "", auth.WorkflowsRead},
		{"GET", "/v1/workflows/order-publish/runs/run-1", "", auth.WorkflowsRead},
		{"DELETE", "/v1/workflows/order-publish", "", auth.WorkflowsWrite},
		{"GET", "/v1/triggers/health", "", auth.WorkflowsRead},
		{"DELETE", "/v1/discovery/invalidate", "", auth.WorkflowsWrite},
		{"GET", "/v1/discovery/invalidate", "", auth.WorkflowsWrite},
		{"GET", "/healthz", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			authz.mu.Lock()
			authz.asked = nil
			authz.mu.Unlock()
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			authz.mu.Lock()
			asked := authz.asked
			authz.mu.Unlock()
			wantStatus := http.StatusForbidden
			if tt.want == "" {
				wantStatus = http.StatusOK
			}
			if resp.StatusCode != wantStatus || !slices.Equal(asked, slices.DeleteFunc([]string{tt.want}, func(s string) bool { return s == "" })) {
				t.Errorf("%s %s = %d asking %v, want %d asking %q", tt.method, tt.path, resp.StatusCode, asked, wantStatus, tt.want)
			}
		})
	}
	if len(o.List()) != 0 {
		t.Errorf("a refused upload stored a workflow: %v", o.List())
	}
}

// TestRunOwnsScheduledRuns: when Run's context ends, the scheduled runs still going are
// cancelled and Run returns only after they ended (before, they outlived it).
func TestRunOwnsScheduledRuns(t *testing.T) {
	invoked := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // read whole: the server then notices when the caller gives up
		if strings.HasSuffix(r.URL.Path, "/invoke") {
			select {
			case invoked <- struct{}{}:
			default:
			}
		}
		<-r.Context().Done() // answers nothing until the caller gives up
	}))
	t.Cleanup(slow.Close)
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, ProviderTimeout: 100 * time.Millisecond,
		Static: []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: slow.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	src := "name: tick\ninvocation:\n  type: [schedule]\n  schedule: \"@every 1s\"\nvalidation:\n  provider_strict: false\nsteps:\n" +
		"  - id: s\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish, provider: jms, capability_version: \">=1.0\"}\n" +
		"    request: {destination: d}\n    timeout: 60s\n"
	if _, err := o.Upload(context.Background(), []byte(src)); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Publish("tick"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	select {
	case <-invoked:
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("no scheduled run reached the provider")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if h, _ := o.Runs("tick"); len(h.Runs) != 1 || h.Runs[0].Status != apiv1.RunFailed {
		t.Errorf("when Run returned, the scheduled run had not ended: %+v", h.Runs)
	}
}

// TestTriggerHealthSurvivesARestart: runs land in the trigger health (JSON and CSV), and
// the run history and the slices come back after a restart on the same dir.
func TestTriggerHealthSurvivesARestart(t *testing.T) {
	e := newEnv(t, nil, "")
	if _, err := e.o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatal(err)
	}
	e.o.Publish("order-publish")
	for i := range 3 {
		if run, err := e.o.RunNow(context.Background(), "order-publish", "http", json.RawMessage(fmt.Sprintf(`{"order":%d}`, i))); err != nil || run.Status != apiv1.RunSucceeded {
			t.Fatalf("run: %+v %v", run, err)
		}
	}
	bad := strings.Replace(string(workflows.OrderPublish), "destination: orders.events", `destination: " "`, 1)
	if _, err := e.o.Upload(context.Background(), []byte(bad)); err != nil {
		t.Fatal(err)
	}
	e.o.Publish("order-publish")
	if run, _ := e.o.RunNow(context.Background(), "order-publish", "http", nil); run.Status != apiv1.RunFailed {
		t.Fatalf("failing run: %+v", run)
	}
	health := func(o *orchestrator.Orchestrator) apiv1.TriggerHealth {
		srv := httptest.NewServer(o.Handler())
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/v1/triggers/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h apiv1.TriggerHealthResponse
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || len(h.Workflows) != 1 || h.Warning != 0.95 || h.Critical != 0.90 || h.SliceSeconds != 300 {
			t.Fatalf("trigger health: %+v %v", h, err)
		}
		return h.Workflows[0]
	}
	before := health(e.o)
	if before.Runs != 4 || before.Succeeded != 3 || before.SuccessRate != 0.75 || before.P95MS <= 0 || len(before.Slices) < 1 {
		t.Errorf("trigger health = %+v, want 3 of 4 runs", before)
	}
	code, _ := e.do(t, "GET", "/v1/triggers/health?format=xml", "")
	if code != 400 {
		t.Errorf("format=xml: %d", code)
	}
	resp, err := http.Get(e.srv.URL + "/v1/triggers/health?format=csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(resp.Body).ReadAll()
	resp.Body.Close()
	if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "workflow,slice_start,runs,succeeded,success_rate,p95_ms" || rows[1][0] != "order-publish" {
		t.Errorf("csv: %v %q", err, rows)
	}

	o2, err := orchestrator.New(orchestrator.Config{Discovery: e.disc, Dir: e.dir, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := health(o2); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("after a restart: %+v, want %+v", after, before)
	}
	if h, _ := o2.Runs("order-publish"); len(h.Runs) != 4 || h.SuccessRate != 0.75 {
		t.Errorf("run history after a restart: %d runs, success rate %v", len(h.Runs), h.SuccessRate)
	}
	if err := o2.Delete("order-publish"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "order-publish.runs.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run history outlived its workflow: %v", err)
	}
}

// TestTriggerIncident: failing runs below the critical success rate raise a trigger
// condition (reported once), recovering clears it, and failed runs and validations are
// reported as events.
func TestTriggerIncident(t *testing.T) {
	e := newEnv(t, nil, "")
	var mu sync.Mutex
	var reports []*apiv1.ReportRequest
	rep, err := report.New(report.Config{Reporter: "orc", Send: func(_ context.Context, r *apiv1.ReportRequest) error {
		if err := r.Validate(); err != nil { // as the registry would: a raised trigger names a workflow held
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, r)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{Discovery: e.disc, Strict: true, Reporter: rep})
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(workflows.OrderPublish), "destination: orders.events", `destination: " "`, 1)
	if _, err := o.Upload(context.Background(), []byte(bad)); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-publish")
	conditions := func() []string {
		t.Helper()
		if err := rep.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, r := range reports {
			for _, c := range r.Conditions {
				out = append(out, fmt.Sprintf("%s %s %v", c.Kind, c.Subject, c.Active))
			}
			if len(r.Workflows) > 0 {
				out = append(out, fmt.Sprintf("holding %v", r.Workflows))
			}
		}
		reports = nil
		return out
	}
	run := func(n int) {
		for range n {
			if _, err := o.RunNow(context.Background(), "order-publish", "test", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(2)
	if got := conditions(); len(got) != 0 {
		t.Errorf("two failed runs raised %v: too few to judge", got)
	}
	mu.Lock()
	reports = nil
	mu.Unlock()
	run(2)
	if got := conditions(); fmt.Sprint(got) != "[trigger order-publish true holding [order-publish]]" {
		t.Errorf("four failed runs: %v, want the trigger condition raised once, with the workflows held", got)
	}
	if _, err := o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-publish")
	run(36) // 36 of 40 succeed: 90 %, the critical threshold
	if got := conditions(); fmt.Sprint(got) != "[trigger order-publish false]" {
		t.Errorf("recovered: %v, want the condition cleared", got)
	}
	// failing again, then deleted: its incident ends with it
	if _, err := o.Upload(context.Background(), []byte(bad)); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-publish")
	run(1) // 36 of 41
	if got := conditions(); fmt.Sprint(got) != "[trigger order-publish true holding [order-publish]]" {
		t.Errorf("failing again: %v, want the condition raised", got)
	}
	if err := o.Delete("order-publish"); err != nil {
		t.Fatal(err)
	}
	if got := conditions(); fmt.Sprint(got) != "[trigger order-publish false]" {
		t.Errorf("deleted while failing: %v, want the condition cleared", got)
	}
}

// TestProviderCallsStayUnderTheEndpoint: a step goes to the endpoint's path prefix joined
// with the invoke path, never to a path or host the endpoint's text could splice in; a
// static endpoint with a query, or on the metadata address, is refused at start.
func TestProviderCallsStayUnderTheEndpoint(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"output":{"ok":true}}`)
	}))
	t.Cleanup(prov.Close)
	disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}, RequestTimeout: 100 * time.Millisecond})
	static := func(ep string) []orchestrator.StaticCapability {
		return []orchestrator.StaticCapability{{CapabilityID: "messaging.publish", Provider: "jms", Version: "1.0.0", Endpoint: ep}}
	}
	for _, bad := range []string{prov.URL + "/v1/workflows/rec/run?x=", prov.URL + "/p#f", "http://169.254.169.254/latest"} {
		if _, err := orchestrator.New(orchestrator.Config{Discovery: disc, Static: static(bad)}); err == nil {
			t.Errorf("New took the static endpoint %s", bad)
		}
	}
	src := "name: once\ninvocation:\n  type: [http]\nvalidation:\n  provider_strict: false\nsteps:\n" +
		"  - id: s\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish, provider: jms, capability_version: \">=1.0\"}\n" +
		"    request: {destination: d}\n"
	run := func(ep string) *apiv1.Run {
		t.Helper()
		o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Static: static(ep)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Upload(context.Background(), []byte(src)); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Publish("once"); err != nil {
			t.Fatal(err)
		}
		rec, _ := o.RunNow(context.Background(), "once", "http", nil)
		return rec
	}
	if rec := run(prov.URL + "/prefix/"); rec == nil || rec.Status != apiv1.RunSucceeded {
		t.Fatalf("run = %+v", rec)
	}
	mu.Lock()
	got := slices.Clone(asked)
	mu.Unlock()
	if want := "/prefix/v1/capabilities/messaging.publish/invoke"; !slices.Contains(got, want) {
		t.Errorf("the provider was asked %q, want %q among them", got, want)
	}

}
