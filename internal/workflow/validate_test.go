package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/workflow"
)

const stepTmpl = `  - id: step_%d
    type: service_call
    step_version: "1.1"
    capability:
      id: messaging.publish
      provider: %s
      capability_version: "%s"
    request:
      destination: "%s"
      headers:
        content-type: application/json
`

func workflowYAML(strict string, steps ...string) []byte {
	var b strings.Builder
	b.WriteString("name: demo\ninvocation:\n  type: http\n")
	if strict != "" {
		b.WriteString("validation:\n  provider_strict: " + strict + "\n")
	}
	b.WriteString("steps:\n")
	for _, s := range steps {
		b.WriteString(s)
	}
	return []byte(b.String())
}

func step(i int, provider, constraint, destination string) string {
	return fmt.Sprintf(stepTmpl, i, provider, constraint, destination)
}

// env is a registry with the jms example provider registered at endpoint.
func newResolver(t *testing.T, endpoint string) *discovery.Client {
	t.Helper()
	s := registrytest.NewServer(t, registry.Config{})
	s.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: answers are complete
	p, _ := jms.New(endpoint, "")
	reg := p.Registration()
	if _, err := s.Registry.Register(context.Background(), &reg); err != nil {
		t.Fatal(err)
	}
	c, err := discovery.New(discovery.Config{Registries: []string{s.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func codes(ds []apiv1.Diagnostic) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Severity+" "+d.Code)
	}
	return out
}

func TestProviderLayer(t *testing.T) {
	p, err := jms.New("http://127.0.0.1:7410", "")
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(p.Handler())
	defer provider.Close()
	r := newResolver(t, provider.URL)
	tests := []struct {
		name           string
		src            []byte
		strict         bool
		want           []string
		providerStatus string
	}{
		{"valid with a warning", workflowYAML("", step(0, "jms", ">=1.0 <2.0", "orders")), true,
			[]string{"warning JMS_HEADER_NON_STANDARD"}, apiv1.StatusWarning},
		{"strict blocks a rejected step", workflowYAML("", step(0, "jms", ">=1.0 <2.0", "")), true,
			[]string{"error PROVIDER_REJECTED", "error DESTINATION_REQUIRED", "warning JMS_HEADER_NON_STANDARD"}, apiv1.StatusFailed},
		{"non-strict allows it with warnings", workflowYAML("", step(0, "jms", ">=1.0 <2.0", "")), false,
			[]string{"warning PROVIDER_REJECTED", "warning DESTINATION_REQUIRED", "warning JMS_HEADER_NON_STANDARD"}, apiv1.StatusWarning},
		{"the workflow's own strictness wins", workflowYAML("true", step(0, "jms", ">=1.0 <2.0", "")), false,
			[]string{"error PROVIDER_REJECTED", "error DESTINATION_REQUIRED", "warning JMS_HEADER_NON_STANDARD"}, apiv1.StatusFailed},
		{"unavailable capability says what exists", workflowYAML("", step(0, "jms", ">=2.0", "orders")), true,
			[]string{"error CAPABILITY_UNAVAILABLE"}, apiv1.StatusNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, res := workflow.Validate(context.Background(), tt.src, workflow.Options{Resolver: r, Strict: tt.strict})
			if got := codes(workflow.Diagnostics(res)); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("diagnostics = %v, want %v", got, tt.want)
			}
			if res.ProviderStatus != tt.providerStatus {
				t.Errorf("provider_status = %s, want %s", res.ProviderStatus, tt.providerStatus)
			}
			for _, d := range workflow.Diagnostics(res) {
				if d.Line == 0 || d.Column == 0 {
					t.Errorf("%s without a position", d.Code)
				}
				if d.Code == "CAPABILITY_UNAVAILABLE" && d.Message != "workflow requires jms messaging.publish >=2.0; registry has 1.0.0 only" {
					t.Errorf("message = %q", d.Message)
				}
				if want := lineOf(tt.src, "content-type"); d.Code == "JMS_HEADER_NON_STANDARD" && d.Line != want {
					t.Errorf("provider diagnostic on line %d, want %d (the header)", d.Line, want)
				}
			}
		})
	}
}

func TestProviderTimeoutAndUnreachable(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for name, tc := range map[string]struct {
		endpoint string
		code     string
	}{"timeout": {slow.URL, "PROVIDER_TIMEOUT"}, "unreachable": {dead.URL, "PROVIDER_UNREACHABLE"}} {
		t.Run(name, func(t *testing.T) {
			r := newResolver(t, tc.endpoint)
			// 20 steps against one slow provider: bounded by one timeout, not twenty
			var steps []string
			for i := range 20 {
				steps = append(steps, step(i, "jms", ">=1.0", "d"))
			}
			src := workflowYAML("", steps...)
			for _, strict := range []bool{true, false} {
				_, res := workflow.Validate(context.Background(), src, workflow.Options{Resolver: r, Strict: strict, ProviderTimeout: 50 * time.Millisecond})
				ds := workflow.Diagnostics(res)
				if len(ds) != 20 || ds[0].Code != tc.code {
					t.Fatalf("strict=%v: %v", strict, codes(ds))
				}
				want, status := "error", apiv1.StatusFailed
				if !strict {
					want, status = "warning", apiv1.StatusSkipped
				}
				if ds[0].Severity != want || res.ProviderStatus != status {
					t.Errorf("strict=%v: %s / %s, want %s / %s", strict, ds[0].Severity, res.ProviderStatus, want, status)
				}
			}
		})
	}
}

func TestWarmingUpRegistryOnlyWarns(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{}) // just started: incomplete answers
	c, _ := discovery.New(discovery.Config{Registries: []string{s.URL}})
	_, res := workflow.Validate(context.Background(), workflowYAML("", step(0, "jms", ">=1.0", "d")), workflow.Options{Resolver: c, Strict: true})
	ds := workflow.Diagnostics(res)
	if len(ds) != 1 || ds[0].Code != "CAPABILITY_UNAVAILABLE" || ds[0].Severity != "warning" || res.ContractStatus != "passed" {
		t.Errorf("%v %s", codes(ds), res.ContractStatus)
	}
}

func TestDiscoveryUnavailable(t *testing.T) {
	c, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	_, res := workflow.Validate(context.Background(), workflowYAML("", step(0, "jms", ">=1.0", "d")), workflow.Options{Resolver: c, Strict: true})
	ds := workflow.Diagnostics(res)
	if len(ds) != 1 || ds[0].Code != "DISCOVERY_UNAVAILABLE" || ds[0].Severity != "warning" || res.ContractStatus != "passed" {
		t.Errorf("%v %s", codes(ds), res.ContractStatus)
	}
}

func TestHundredSteps(t *testing.T) {
	var steps []string
	for i := range 100 {
		steps = append(steps, step(i, "jms", ">=1.0 <2.0", "d"))
	}
	w, ds := workflow.Parse(workflowYAML("", steps...))
	if len(ds) != 0 || len(w.Steps) != 100 || w.Steps[99].ID != "step_99" {
		t.Fatalf("%d steps, diagnostics %v", len(w.Steps), codes(ds))
	}
	var req map[string]any
	json.Unmarshal(w.Steps[5].Request, &req)
	if req["destination"] != "d" {
		t.Errorf("request = %s", w.Steps[5].Request)
	}
}

func BenchmarkContractPerStep(b *testing.B) {
	var steps []string
	for i := range 100 {
		steps = append(steps, step(i, "jms", ">=1.0 <2.0", "d"))
	}
	src := workflowYAML("", steps...)
	b.ReportAllocs()
	for b.Loop() {
		workflow.Parse(src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/step")
}

func FuzzParse(f *testing.F) {
	f.Add(workflowYAML("", step(0, "jms", ">=1.0", "d")))
	f.Add([]byte("name: x\nsteps: [ {id: a, request: {payload_from: a}} ]"))
	f.Add([]byte("a: !00\n  b"))
	f.Add([]byte("- [\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		w, ds := workflow.Parse(src)
		if w == nil {
			t.Fatal("no workflow")
		}
		for _, d := range ds {
			if d.Code == "" || d.Line < 1 || d.Column < 1 {
				t.Fatalf("diagnostic without code or position: %+v", d)
			}
		}
	})
}

// lineOf is the 1-based line of the first occurrence of s in src.
func lineOf(src []byte, s string) int {
	i := strings.Index(string(src), s)
	return strings.Count(string(src[:i]), "\n") + 1
}

// BenchmarkConstraintMatch is the per-step cost of matching a step's constraint against a
// registered version (parse the constraint, check the version).
func BenchmarkConstraintMatch(b *testing.B) {
	v := semver.MustParse("1.4.2")
	b.ReportAllocs()
	for b.Loop() {
		c, err := registry.ParseConstraint(">=1.0 <2.0")
		if err != nil || !c.Check(v) {
			b.Fatal("no match")
		}
	}
}

// BenchmarkConstraintCheck is the match alone, the constraint parsed once per workflow.
func BenchmarkConstraintCheck(b *testing.B) {
	v := semver.MustParse("1.4.2")
	c, _ := registry.ParseConstraint(">=1.0 <2.0")
	for b.Loop() {
		if !c.Check(v) {
			b.Fatal("no match")
		}
	}
}

// TestYAMLLimits: text a parser would spend gigabytes on is refused before parsing, with a
// diagnostic that says which limit; a workflow within them parses as before.
func TestYAMLLimits(t *testing.T) {
	nested := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Repeat("  ", i) + "- \n")
		}
		return b.String()
	}
	tests := []struct {
		name string
		src  string
		code string
	}{
		{"100,000 nested brackets", "name: x\nsteps: " + strings.Repeat("[", 100_000), workflow.CodeYAMLLimit},
		{"65 nested brackets", "name: x\nsteps: " + strings.Repeat("[", 65) + strings.Repeat("]", 65), workflow.CodeYAMLLimit},
		{"a line indented 300 columns", "name: x\n" + nested(150), workflow.CodeYAMLLimit},
		{"101 aliases", "name: x\na: &a 1\nb: [" + strings.Repeat("*a, ", 101) + "]\n", workflow.CodeYAMLLimit},
		{"brackets in quotes and comments are text", "name: '[[[[' # [[[[[[[[\nsteps: \"" + strings.Repeat("[", 100) + "\"\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ds := workflow.Parse([]byte(tt.src))
			var codes []string
			for _, d := range ds {
				codes = append(codes, d.Code)
			}
			if tt.code != "" && (len(ds) != 1 || ds[0].Code != tt.code || ds[0].Line == 0) {
				t.Fatalf("diagnostics %+v, want one %s with its position", ds, tt.code)
			}
			if tt.code == "" && slices.Contains(codes, workflow.CodeYAMLLimit) {
				t.Fatalf("diagnostics %+v: a limit where there is none", ds)
			}
		})
	}
}

// TestNestedStepsReachTheProvider: a service_call inside a loop is resolved and validated by
// its provider like a top-level one, its diagnostics placed on its own lines with the nested
// path.
func TestNestedStepsReachTheProvider(t *testing.T) {
	p, err := jms.New("http://127.0.0.1:7410", "")
	if err != nil {
		t.Fatal(err)
	}
	provider := httptest.NewServer(p.Handler())
	defer provider.Close()
	src := []byte("name: nested\ninvocation: {type: http}\nsteps:\n  - id: each\n    type: loop\n    for_each: [1, 2]\n    steps:\n" +
		"      - id: pub\n        type: service_call\n        step_version: \"1.1\"\n        capability: {id: messaging.publish, provider: jms}\n" +
		"        request:\n          destination: \"\"\n          headers: {content-type: application/json}\n" +
		"      - id: gone\n        type: service_call\n        capability: {id: messaging.publish, provider: jms, capability_version: \">=2.0\"}\n")
	_, res := workflow.Validate(context.Background(), src, workflow.Options{Resolver: newResolver(t, provider.URL), Strict: true})
	got := map[string]string{}
	for _, d := range workflow.Diagnostics(res) {
		got[d.Code] = fmt.Sprintf("%s@%d", d.Path, d.Line)
	}
	want := map[string]string{
		"PROVIDER_REJECTED":       fmt.Sprintf("steps[0].steps[0]@%d", lineOf(src, "capability: {id: messaging.publish, provider: jms}")),
		"DESTINATION_REQUIRED":    fmt.Sprintf("steps[0].steps[0].request.destination@%d", lineOf(src, "destination")),
		"JMS_HEADER_NON_STANDARD": fmt.Sprintf("steps[0].steps[0].request.headers.content-type@%d", lineOf(src, "content-type")),
		"CAPABILITY_UNAVAILABLE":  fmt.Sprintf("steps[0].steps[1].capability@%d", lineOf(src, "capability: {id: messaging.publish, provider: jms, capability_version")),
	}
	for code, w := range want {
		if got[code] != w {
			t.Errorf("%s at %q, want %q (all: %v)", code, got[code], w, got)
		}
	}
	if len(res.Steps) != 3 || res.Steps[1].Path != "steps[0].steps[0]" || res.Steps[1].Provider.Status != apiv1.StatusFailed {
		t.Errorf("step results = %+v", res.Steps)
	}
}

// TestValidateEndpointFromMetadata: the orchestrator validates a step at the provider's
// metadata.validate_endpoint (under its endpoint), not at the default path; a malformed
// one falls back to the default.
func TestValidateEndpointFromMetadata(t *testing.T) {
	p, err := jms.New("http://127.0.0.1:7410", "")
	if err != nil {
		t.Fatal(err)
	}
	var custom atomic.Int64
	h := p.Handler()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/custom/validate":
			custom.Add(1)
			r.URL.Path = apiv1.ValidatePath("messaging.publish")
			h.ServeHTTP(w, r)
		case apiv1.ValidatePath("messaging.publish"):
			http.NotFound(w, r) // validated elsewhere
		default:
			h.ServeHTTP(w, r)
		}
	}))
	defer provider.Close()
	for _, tc := range []struct {
		endpoint string
		want     string // the provider status
		asked    int64
	}{
		{"/custom/validate", apiv1.StatusWarning, 1}, // JMS_HEADER_NON_STANDARD, from the custom path
		{"../custom/validate", apiv1.StatusFailed, 0},
	} {
		s := registrytest.NewServer(t, registry.Config{})
		s.Clock.Advance(registry.DefaultLeaseTTL)
		reg := p.Registration()
		reg.Endpoint = provider.URL
		var meta map[string]any
		json.Unmarshal(reg.Capabilities[0].Metadata, &meta)
		meta["validate_endpoint"] = tc.endpoint
		reg.Capabilities[0].Metadata, _ = json.Marshal(meta)
		if _, err := s.Registry.Register(context.Background(), &reg); err != nil {
			t.Fatal(err)
		}
		c, err := discovery.New(discovery.Config{Registries: []string{s.URL}})
		if err != nil {
			t.Fatal(err)
		}
		custom.Store(0)
		_, res := workflow.Validate(context.Background(), workflowYAML("", step(0, "jms", ">=1.0 <2.0", "orders")), workflow.Options{Resolver: c, Strict: true})
		if res.ProviderStatus != tc.want || custom.Load() != tc.asked {
			t.Errorf("validate_endpoint %q: provider status %s (%v), custom path asked %d times; want %s and %d",
				tc.endpoint, res.ProviderStatus, codes(workflow.Diagnostics(res)), custom.Load(), tc.want, tc.asked)
		}
	}
}

// TestProviderRedirectsAreNotFollowed: a provider whose validate endpoint answers 307 to
// another address does not get the step re-sent there: the validation fails, saying so.
func TestProviderRedirectsAreNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		io.WriteString(w, `{"valid":true}`)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	_, res := workflow.Validate(context.Background(), workflowYAML("", step(0, "jms", ">=1.0", "d")), workflow.Options{Resolver: newResolver(t, redirecting.URL), Strict: true})
	ds := workflow.Diagnostics(res)
	if res.ProviderStatus != apiv1.StatusFailed || len(ds) != 1 || !strings.Contains(ds[0].Message, "never followed") {
		t.Errorf("validation against a redirecting provider: %s %+v, want failed saying the redirect was not followed", res.ProviderStatus, ds)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d validation calls reached the address the provider redirected to, want none", n)
	}
}
