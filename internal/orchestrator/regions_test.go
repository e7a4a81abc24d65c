package orchestrator_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/registry"
)

// TestStepsSpillToTheNextRegionOn: a regional orchestrator resolves its steps in its home
// region while home is on, in the next region once home is off, and reports the outcomes of
// the other region's instances to that region's registry.
func TestStepsSpillToTheNextRegionOn(t *testing.T) {
	mb, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: registry.DefaultLeaseTTL}})
	if err != nil {
		t.Fatal(err)
	}
	a := newEnvWith(t, nil, "", registry.Config{Region: "a"})
	b := newEnvWith(t, nil, "", registry.Config{Region: "b", Eligibility: mb})
	off := map[string]bool{}
	rs, err := discovery.NewRegions(discovery.RegionsConfig{Home: "a", Clients: map[string]*discovery.Client{"a": a.disc, "b": b.disc},
		On: func(r string) bool { return !off[r] }, Ready: orchestrator.ReadyPool(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{Discovery: a.disc, Regions: rs, Dir: t.TempDir(), Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{o: o, srv: httptest.NewServer(o.Handler())}
	t.Cleanup(e.srv.Close)
	if code, body := e.do(t, "POST", "/v1/workflows", string(workflows.OrderPublish)); code != 201 {
		t.Fatalf("upload = %d %v", code, body)
	}
	if code, body := e.do(t, "POST", "/v1/workflows/order-publish/publish", ""); code != 200 {
		t.Fatalf("publish = %d %v", code, body)
	}
	run := func() {
		t.Helper()
		a.disc.Invalidate()
		b.disc.Invalidate()
		if code, run := e.do(t, "POST", "/v1/workflows/order-publish/run", `{"order": 7}`); code != 200 || run["status"] != "succeeded" {
			t.Fatalf("run = %d %v", code, run)
		}
	}
	run()
	if na, nb := len(a.jms.Messages("orders.events")), len(b.jms.Messages("orders.events")); na != 1 || nb != 0 {
		t.Fatalf("home on: a got %d, b got %d", na, nb)
	}
	off["a"] = true
	run()
	if na, nb := len(a.jms.Messages("orders.events")), len(b.jms.Messages("orders.events")); na != 1 || nb != 1 {
		t.Fatalf("home off: a got %d, b got %d", na, nb)
	}
	o.ReportOutcomes(context.Background())
	id := b.jms.Registration().InstanceID
	if ex, ok := mb.Explain(id, b.reg.Clock.Now().Add(time.Millisecond)); !ok || ex.Outcomes == nil || ex.Outcomes.Requests != 1 {
		t.Errorf("b's registry holds no outcome of %s: %+v", id, ex.Outcomes)
	}
}
