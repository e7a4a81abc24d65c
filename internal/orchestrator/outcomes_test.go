package orchestrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
)

// TestStepOutcomesAreReportedPerInstance: the service_call steps' answers are counted per
// instance and reported to the registry, which pools them like a gateway's: a provider that
// answers 500 to every publish once faulty shows its errors, the healthy one its answers, and the
// orchestrator is the reporter.
func TestStepOutcomesAreReportedPerInstance(t *testing.T) {
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: registry.DefaultLeaseTTL}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, nil, "", registry.Config{Eligibility: m})
	if code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderPublish)); code != 201 {
		t.Fatalf("upload = %d %v", code, body)
	}
	if code, body := e.do(t, "POST", "/v1/workflows/order-publish/publish", ""); code != 200 {
		t.Fatalf("publish = %d %v", code, body)
	}
	const runs = 3
	for range runs { // jms then rabbitmq, both answer
		e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 7}`)
	}
	if err := e.jms.SetFaults(messaging.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	for range runs { // jms answers 500: the run fails there
		e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 7}`)
	}
	e.o.ReportOutcomes(context.Background())
	now := e.reg.Clock.Now()
	for _, tt := range []struct {
		p                *messaging.Provider
		requests, errors int
	}{
		{e.rmq, runs, 0},
		{e.jms, 2 * runs, runs},
	} {
		req := tt.p.Registration()
		ex, ok := m.Explain(req.InstanceID, now)
		o := ex.Outcomes
		if !ok || o == nil {
			t.Fatalf("%s: no outcomes recorded (%+v)", req.InstanceID, ex)
		}
		if o.Requests != tt.requests || o.Errors != tt.errors || len(o.Reporters) != 1 || o.Reporters[0].Reporter != "orchestrator" || o.LatencyMsP99 <= 0 {
			t.Errorf("%s: outcomes = %+v, want %d errors in %d requests from the orchestrator, with a latency", req.InstanceID, o, tt.errors, tt.requests)
		}
	}
	e.o.ReportOutcomes(context.Background()) // a window with nothing in it sends nothing
	if ex, _ := m.Explain(e.rmq.Registration().InstanceID, now.Add(time.Nanosecond)); ex.Outcomes.Requests != runs {
		t.Errorf("after an empty window: %+v", ex.Outcomes)
	}
}
