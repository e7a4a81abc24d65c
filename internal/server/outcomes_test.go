package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// newOutcomeServer is a registry with the eligibility engine, its metrics on reg and an
// outcome rate of one batch a second, three at once.
func newOutcomeServer(t *testing.T, reg *prometheus.Registry) *registrytest.Server {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, Eligibility: m,
		Registerer: reg, OutcomeRate: 1, OutcomeBurst: 3})
}

// TestBadOutcomesAreRefusedAndCounted: impossible counts and latencies are 400 with the
// field named; outcomes of an instance the registry does not hold, or of an older
// generation, are ignored; each is counted by result.
func TestBadOutcomesAreRefusedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newOutcomeServer(t, reg)
	gen := register(t, s, zonalRegistration("i1", "z1")).Generation
	tests := []struct {
		name    string
		outcome string
		status  int
		paths   []string
	}{
		{"negative counts", fmt.Sprintf(`{"instance_id":"i1","generation":%d,"ok":-1,"errors":0,"connect_failures":0}`, gen), 400, []string{"outcomes[0]"}},
		{"a count over 10^9", fmt.Sprintf(`{"instance_id":"i1","generation":%d,"ok":1000000001,"errors":0,"connect_failures":0}`, gen), 400, []string{"outcomes[0]"}},
		{"a negative latency", fmt.Sprintf(`{"instance_id":"i1","generation":%d,"ok":1,"errors":0,"connect_failures":0,"latency_ms_p99":-3}`, gen), 400, []string{"outcomes[0].latency_ms_p99"}},
		{"a latency over a day", fmt.Sprintf(`{"instance_id":"i1","generation":%d,"ok":1,"errors":0,"connect_failures":0,"latency_ms_p99":1e12}`, gen), 400, []string{"outcomes[0].latency_ms_p99"}},
		{"an unknown instance", `{"instance_id":"nobody","generation":1,"ok":1,"errors":0,"connect_failures":0}`, 200, nil},
		{"a stale generation", fmt.Sprintf(`{"instance_id":"i1","generation":%d,"ok":1,"errors":0,"connect_failures":0}`, gen+7), 200, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Clock.Advance(time.Second) // a batch a second: within the rate
			r := do(t, "POST", s.URL+"/v1/outcomes", `{"gateway_id":"gw-1","outcomes":[`+tt.outcome+`]}`)
			if r.status != tt.status {
				t.Fatalf("status = %d %s, want %d", r.status, r.body, tt.status)
			}
			var body apiv1.ErrorBody
			json.Unmarshal(r.body, &body)
			for _, p := range tt.paths {
				if body.Error == nil || !hasDetail(body.Error.Details, p) {
					t.Errorf("no detail for %s in %s", p, r.body)
				}
			}
			if tt.status == 200 && !strings.Contains(string(r.body), `"ignored":1`) {
				t.Errorf("answer = %s, want it ignored", r.body)
			}
		})
	}
	want := map[string]float64{"invalid": 4, "unknown_instance": 1, "stale_generation": 1, "accepted": 0, "rate_limited": 0}
	for result, n := range want {
		c, err := counterOf(reg, "meshflows_registry_outcomes_total", "result", result)
		if err != nil || c != n {
			t.Errorf("outcomes_total{result=%q} = %v (%v), want %v", result, c, err, n)
		}
	}
}

func hasDetail(ds []apiv1.Detail, path string) bool {
	for _, d := range ds {
		if d.Path == path {
			return true
		}
	}
	return false
}

// counterOf reads one series of a counter vector from reg.
func counterOf(reg *prometheus.Registry, name, label, value string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue(), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("%s{%s=%q} not gathered", name, label, value)
}

// TestAReporterFloodingOutcomesIsRateLimited: past its burst a reporter gets 429 with
// Retry-After and its outcomes are not applied; another reporter is not held back, and the
// first gets its budget back with time.
func TestAReporterFloodingOutcomesIsRateLimited(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newOutcomeServer(t, reg)
	gen := register(t, s, zonalRegistration("i1", "z1")).Generation
	batch := func(gw string) response {
		return do(t, "POST", s.URL+"/v1/outcomes", fmt.Sprintf(`{"gateway_id":%q,"outcomes":[{"instance_id":"i1","generation":%d,"ok":10,"errors":0,"connect_failures":0,"latency_ms_p99":12.5}]}`, gw, gen))
	}
	for i := range 3 {
		if r := batch("flood"); r.status != 200 {
			t.Fatalf("batch %d of the burst = %d %s", i, r.status, r.body)
		}
	}
	r := batch("flood")
	if r.status != 429 || r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), "RATE_LIMITED") {
		t.Fatalf("the batch past the burst = %d (Retry-After %q) %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := batch("gw-2"); r.status != 200 {
		t.Errorf("another reporter = %d %s", r.status, r.body)
	}
	s.Clock.Advance(time.Second)
	if r := batch("flood"); r.status != 200 {
		t.Errorf("after a second = %d %s", r.status, r.body)
	}
	if c, _ := counterOf(reg, "meshflows_registry_outcomes_total", "result", "rate_limited"); c != 1 {
		t.Errorf("rate_limited = %v, want 1", c)
	}
	if c, _ := counterOf(reg, "meshflows_registry_outcomes_total", "result", "accepted"); c != 5 {
		t.Errorf("accepted = %v, want 5", c)
	}
	// what was applied is explained: 50 requests from two reporters, the latency recorded
	var ex apiv1.Explanation
	json.Unmarshal(do(t, "GET", s.URL+"/v1/services/i1/eligibility", "").body, &ex)
	if ex.Outcomes == nil || ex.Outcomes.Requests != 50 || len(ex.Outcomes.Reporters) != 2 || ex.Outcomes.LatencyMsP99 != 12.5 {
		t.Errorf("outcomes explained = %+v", ex.Outcomes)
	}
}
