package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
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

// family is the metric family name gathered from reg, or nil when reg has none.
func family(reg prometheus.Gatherer, name string) (*dto.MetricFamily, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf, nil
		}
	}
	return nil, nil
}

// counterOf reads one series of a counter vector from reg.
func counterOf(reg *prometheus.Registry, name, label, value string) (float64, error) {
	mf, err := family(reg, name)
	if err != nil {
		return 0, err
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue(), nil
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

// TestAZoneFailingAsAWholeIsReported: with zone z2 failing 5 % of requests and z1, z3 at
// 0.2 %, pooled from two gateways, no instance is ejected (inside its zone each is like its
// peers), and at the next judgment the zone is on /v1/discovery/health, a critical incident
// names it with the evacuation command, the journal says so and the gauge has its series.
// When the zone is healthy again the incident resolves.
func TestAZoneFailingAsAWholeIsReported(t *testing.T) {
	j := journal.New(0, nil)
	incidents, err := incident.New(incident.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var owner func(string) string
	raise, record := incident.FromTransitions(incidents, func(id string) string { return owner(id) }), journal.FromTransitions(j)
	m, err := health.NewMonitor(health.MonitorConfig{Registerer: reg, OnTransition: func(tr health.Transition) { record(tr); raise(tr) },
		Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.NewServerWith(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, Eligibility: m, Journal: j},
		server.Config{Journal: j, Incidents: incidents}, registrytest.Epoch0)
	owner = s.Registry.Owner
	gens := map[string]int64{}
	zones := []string{"z1", "z1", "z2", "z2", "z3", "z3"}
	for i, zone := range zones {
		id := fmt.Sprintf("i%d", i)
		gens[id] = register(t, s, zonalRegistration(id, zone)).Generation
	}
	report := func(badShare func(zone string) int) { // errors per 1,000 requests of a zone
		for _, gw := range []string{"gw-1", "gw-2"} {
			var outs []string
			for i, zone := range zones {
				id := fmt.Sprintf("i%d", i)
				errs := badShare(zone) / 2
				outs = append(outs, fmt.Sprintf(`{"instance_id":%q,"generation":%d,"ok":%d,"errors":%d,"connect_failures":0}`, id, gens[id], 500-errs, errs))
			}
			if r := do(t, "POST", s.URL+"/v1/outcomes", fmt.Sprintf(`{"gateway_id":%q,"outcomes":[%s]}`, gw, strings.Join(outs, ","))); r.status != 200 {
				t.Fatalf("outcomes = %d %s", r.status, r.body)
			}
		}
		s.Clock.Advance(11 * time.Second)
		for id, g := range gens {
			do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", fmt.Sprintf(`{"generation":%d}`, g))
		}
		if _, err := s.Registry.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	z2Bad := func(zone string) int {
		if zone == "z2" {
			return 50
		}
		return 2
	}
	report(z2Bad)
	report(z2Bad)
	var h apiv1.HealthResponse
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/health", "").body, &h)
	if len(h.ZoneOutliers) != 1 || h.ZoneOutliers[0].Zone != "z2" || h.ZoneOutliers[0].CapabilityID != "messaging.publish" || !h.ZoneOutliers[0].Outlier {
		t.Fatalf("zone_outliers = %+v", h.ZoneOutliers)
	}
	if z := h.ZoneOutliers[0]; z.Requests != 4000 || z.Errors != 200 || z.OtherZones != 2 {
		t.Errorf("figures = %+v, want 200 errors in 4,000 requests against 2 other zones", z)
	}
	for id, st := range verdicts(t, s.URL) {
		if !strings.HasPrefix(st, apiv1.EligibilityServing) && !strings.HasPrefix(st, apiv1.EligibilitySlowStart) {
			t.Errorf("%s is %s: a zone outlier ejects no instance", id, st)
		}
	}
	open := incidents.List("unresolved")
	if len(open) != 1 || open[0].Kind != apiv1.IncidentZoneOutlier || open[0].Severity != apiv1.IncidentCritical || open[0].Subject != "messaging.publish/z2" ||
		!strings.Contains(open[0].Summary, "meshflows evacuate zone z2 --capability messaging.publish") || !strings.Contains(open[0].Summary, "100 errors in 2000 requests (5.00%") {
		t.Fatalf("incidents = %+v", open)
	}
	if got := events(t, s.URL, "type=eligibility.zone_outlier").Events; len(got) != 1 || got[0].Attrs["zone"] != "z2" {
		t.Errorf("journal = %+v", got)
	}
	if n := gaugeSeries(t, reg, "meshflows_zone_outlier_error_share"); n != 1 {
		t.Errorf("meshflows_zone_outlier_error_share has %d series, want 1", n)
	}
	healthy := func(string) int { return 2 }
	for range 7 { // past the window: z2's errors age out
		report(healthy)
	}
	if open := incidents.List("unresolved"); len(open) != 0 {
		t.Errorf("after the zone recovered: %+v", open)
	}
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/health", "").body, &h)
	if len(h.ZoneOutliers) != 0 {
		t.Errorf("zone_outliers after recovery = %+v", h.ZoneOutliers)
	}
	if n := gaugeSeries(t, reg, "meshflows_zone_outlier_error_share"); n != 0 {
		t.Errorf("meshflows_zone_outlier_error_share has %d series after recovery", n)
	}
}

// gaugeSeries counts the series of one metric gathered from reg.
func gaugeSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mf, err := family(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	return len(mf.GetMetric())
}

// TestAReplicaFailingFourPercentIsEjectedAndCounted: one of six replicas failing 4 % while
// its peers fail 0.1 %, pooled from two gateways, is ejected with OUTLIER_RELATIVE and its
// evidence, is explained beside its peers' baseline, and is the one series of
// meshflows_outlier_instances.
func TestAReplicaFailingFourPercentIsEjectedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := health.NewMonitor(health.MonitorConfig{Registerer: reg, Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, Eligibility: m})
	gens := map[string]int64{}
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		gens[id] = register(t, s, zonalRegistration(id, "z1")).Generation
	}
	for range 2 {
		for _, gw := range []string{"gw-1", "gw-2"} {
			var outs []string
			for id, g := range gens {
				errs := 0
				switch {
				case id == "i0":
					errs = 20 // 4 %
				case gw == "gw-1":
					errs = 1 // 0.1 % pooled
				}
				outs = append(outs, fmt.Sprintf(`{"instance_id":%q,"generation":%d,"ok":%d,"errors":%d,"connect_failures":0}`, id, g, 500-errs, errs))
			}
			do(t, "POST", s.URL+"/v1/outcomes", fmt.Sprintf(`{"gateway_id":%q,"outcomes":[%s]}`, gw, strings.Join(outs, ",")))
		}
		s.Clock.Advance(11 * time.Second)
		for id, g := range gens {
			do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", fmt.Sprintf(`{"generation":%d}`, g))
		}
		s.Registry.Sweep(t.Context())
	}
	for id, st := range verdicts(t, s.URL) {
		if out := strings.HasPrefix(st, apiv1.EligibilityWithdrawn); out != (id == "i0") {
			t.Errorf("%s is %s", id, st)
		}
	}
	var ex apiv1.Explanation
	json.Unmarshal(do(t, "GET", s.URL+"/v1/services/i0/eligibility", "").body, &ex)
	if len(ex.Reasons) == 0 || ex.Reasons[0].Code != health.ReasonOutlierRelative || !strings.Contains(ex.Reasons[0].Evidence.Detail, "reporters gw-1, gw-2") {
		t.Errorf("reasons = %+v", ex.Reasons)
	}
	if o := ex.Outcomes; o == nil || o.Errors != 80 || o.Requests != 2000 || len(o.Cohorts) != 1 || o.Cohorts[0].Comparable != 5 || o.Cohorts[0].Baseline == nil || *o.Cohorts[0].Baseline != 0.001 {
		t.Errorf("outcomes = %+v", ex.Outcomes)
	}
	if n := gaugeSeries(t, reg, "meshflows_outlier_instances"); n != 1 {
		t.Errorf("meshflows_outlier_instances has %d series, want 1 (the cohort of i0)", n)
	}
}
