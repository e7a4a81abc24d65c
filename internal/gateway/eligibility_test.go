package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/provider"
	"github.com/meshflows/meshflows/routing"
)

func newJudgedEnv(t *testing.T, gcfg gateway.Config) *env {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, registry.Config{Eligibility: m}, gcfg)
}

// caughtUp waits until the gateway's table reflects the registry's current revision.
func (e *env) caughtUp(t *testing.T) {
	t.Helper()
	want := e.reg.Registry.State().Revision
	registrytest.Until(t, "the gateway applies revision "+strconv.FormatInt(want, 10), func() bool {
		var r routing.RoutesAnswer
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return r.RegistryRevision == want
	})
}

// spread sends n requests and counts which upstream answered each.
func (e *env) spread(t *testing.T, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		a := e.do(t, "GET", "/orders/1", "")
		if a.status != http.StatusOK {
			out[a.body]++
			continue
		}
		out[strings.Fields(a.body)[0]]++
	}
	return out
}

func TestGatewayBalancesByEligibility(t *testing.T) {
	e := newJudgedEnv(t, gateway.Config{})
	gens := map[string]int64{}
	for _, name := range []string{"a", "b", "c"} {
		e.register(t, name, upstream(t, name).URL, ordersRoutes...)
		in, _ := e.reg.Registry.Instance(name)
		gens[name] = in.Generation
	}
	e.reg.Clock.Advance(time.Minute) // past slow start
	e.reg.Registry.Sweep(context.Background())
	hb := func(id, h string) {
		t.Helper()
		if _, err := e.reg.Registry.Heartbeat(context.Background(), id, &apiv1.HeartbeatRequest{Generation: gens[id], Health: h}); err != nil {
			t.Fatal(err)
		}
	}
	hb("b", apiv1.HealthDegraded)
	e.caughtUp(t)
	if diff := cmp.Diff(map[string]int{"a": 10, "b": 5, "c": 10}, e.spread(t, 25)); diff != "" {
		t.Errorf("weights 100/50/100 (-want +got):\n%s", diff)
	}
	hb("a", apiv1.HealthFailing)
	e.caughtUp(t)
	if diff := cmp.Diff(map[string]int{"b": 5, "c": 10}, e.spread(t, 15)); diff != "" {
		t.Errorf("a withdrawn (-want +got):\n%s", diff)
	}
	hb("c", apiv1.HealthFailing)
	e.caughtUp(t)
	if diff := cmp.Diff(map[string]int{"a": 5, "b": 5, "c": 5}, e.spread(t, 15)); diff != "" {
		t.Errorf("1 of 3 in rotation is panic: all three at 100 (-want +got):\n%s", diff)
	}
}

func TestGatewayReportsOutcomes(t *testing.T) {
	e := newJudgedEnv(t, gateway.Config{OutcomeWindow: -1}) // the test closes the window itself
	bad := httptestStatus(t, http.StatusInternalServerError)
	e.register(t, "bad", bad, ordersRoutes...)
	e.register(t, "good", upstream(t, "good").URL, ordersRoutes...)
	e.caughtUp(t)
	got := e.spread(t, 40)
	if got["good"] != 20 {
		t.Fatalf("spread %v, want 20 to good", got)
	}
	e.gw.ReportOutcomes(context.Background())
	if ex, err := e.reg.Registry.Explain("bad"); err != nil || ex.State != apiv1.EligibilityWithdrawn || ex.Reasons[0].Code != health.ReasonOutlierErrorRate {
		t.Fatalf("after a window of 20 errors in 20: %+v %v, want withdrawn by OUTLIER_ERROR_RATE", ex, err)
	}
	if ex, _ := e.reg.Registry.Explain("good"); ex.State == apiv1.EligibilityWithdrawn {
		t.Fatalf("the good instance was ejected: %+v", ex)
	}
	e.caughtUp(t)
	if got := e.spread(t, 10); got["good"] != 10 {
		t.Errorf("after the ejection: %v, want all 10 to good", got)
	}
}

// httptestStatus is an upstream that answers every request with status.
func httptestStatus(t *testing.T, status int) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	t.Cleanup(s.Close)
	return s.URL
}

// TestEligibilityChangesLogQuietly: a change of eligibility alone (a verdict, a slow-start
// weight) re-picks upstreams without an INFO line; a new table still gets one.
func TestEligibilityChangesLogQuietly(t *testing.T) {
	var logs registrytest.SyncBuffer
	e := newJudgedEnv(t, gateway.Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	e.register(t, "a", upstream(t, "a").URL, ordersRoutes...)
	e.caughtUp(t)
	tables := func() int { return strings.Count(logs.String(), `"msg":"routing table derived"`) }
	before := tables()
	if before == 0 {
		t.Fatalf("no INFO line for the first tables:\n%s", logs.String())
	}
	for range 5 { // slow start ramps: a new weight, a new revision, each second
		e.reg.Clock.Advance(time.Second)
		e.reg.Registry.Sweep(context.Background())
		e.caughtUp(t)
	}
	if n := tables() - before; n != 0 || strings.Contains(logs.String(), "re-picked") {
		t.Errorf("%d INFO lines for weight-only changes:\n%s", n, logs.String())
	}
	e.register(t, "b", upstream(t, "b").URL, apiv1.ManifestRoute{Path: "/orders/b/{id}", Methods: []string{"GET"}})
	e.caughtUp(t)
	if tables() != before+1 {
		t.Errorf("a new route: %d INFO lines, want 1 more than %d:\n%s", tables(), before, logs.String())
	}
}

// TestPanicIsJudgedPerRoute: of a capability's two instances one is admitted and the other
// still unknown — exactly half, so the registry's group is not in panic — but the route that
// only the unknown one serves has none of its pool in rotation: the gateway uses all of that
// pool (Envoy's panic per cluster) instead of answering 503.
func TestPanicIsJudgedPerRoute(t *testing.T) {
	e := newJudgedEnv(t, gateway.Config{})
	e.register(t, "jms", upstream(t, "jms").URL, apiv1.ManifestRoute{Path: "/orders/jms/{id}", Methods: []string{"GET"}})
	req := apiv1.RegisterRequest{InstanceID: "rmq", ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: upstream(t, "rmq").URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: "rmq", Version: "1.0.0"},
			Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "10s", UnhealthyAfter: apiv1.Int(2)}, // probed: unknown until admitted
			Routes: []apiv1.ManifestRoute{{Path: "/orders/rmq/{id}", Methods: []string{"GET"}}}}}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t)
	if ex, _ := e.reg.Registry.Explain("rmq"); ex.State != apiv1.EligibilityUnknown {
		t.Fatalf("rmq is %s, want unknown", ex.State)
	}
	for path, want := range map[string]string{"/orders/jms/1": "jms", "/orders/rmq/1": "rmq"} {
		if a := e.do(t, "GET", path, ""); a.status != http.StatusOK || !strings.HasPrefix(a.body, want) {
			t.Errorf("GET %s = %d %q, want %s", path, a.status, a.body, want)
		}
	}
}

// TestSDKDegradedHealthLowersTheWeight: a provider SDK agent that reports degraded (SetHealth)
// is answered at weight 50 by discovery, and the gateway sends it half as many requests.
func TestSDKDegradedHealthLowersTheWeight(t *testing.T) {
	e := newJudgedEnv(t, gateway.Config{})
	e.register(t, "a", upstream(t, "a").URL, ordersRoutes...)
	id := "b"
	reg := apiv1.RegisterRequest{InstanceID: id, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: upstream(t, "b").URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest:     &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: id, Version: "1.0.0"}, Routes: ordersRoutes}}
	agent, err := provider.New(provider.Config{Registries: []string{e.reg.URL}, Registration: reg, HeartbeatInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Until(t, "the agent registers", func() bool { return agent.Status().Registered })
	e.reg.Clock.Advance(time.Minute) // past slow start
	e.reg.Registry.Sweep(context.Background())
	if err := agent.SetHealth("sideways"); err == nil {
		t.Error("SetHealth accepted an unknown health")
	}
	if err := agent.SetHealth(apiv1.HealthDegraded); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "discovery answers b degraded at weight 50", func() bool {
		in, err := e.reg.Registry.Instance(id)
		return err == nil && in.Eligibility == apiv1.EligibilityDegraded && in.Weight == 50
	})
	e.caughtUp(t)
	if diff := cmp.Diff(map[string]int{"a": 10, "b": 5}, e.spread(t, 15)); diff != "" {
		t.Errorf("weights 100/50 (-want +got):\n%s", diff)
	}
	agent.SetHealth(apiv1.HealthOK)
	registrytest.Until(t, "b back to serving", func() bool {
		in, _ := e.reg.Registry.Instance(id)
		return in.Eligibility == apiv1.EligibilityServing
	})
}
