package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestAnEvacuatedZoneGetsNoTraffic: six upstreams of one route in two zones, traffic through
// the gateway; once the gateway's table holds the evacuation of zone a no request goes
// there, and after its end zone a comes back at the capped weights of its steps. It logs how
// long after the API call the gateway stopped sending to the zone.
func TestAnEvacuatedZoneGetsNoTraffic(t *testing.T) {
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, registry.Config{Eligibility: m}, gateway.Config{})
	zoneOf := map[string]string{}
	for _, name := range []string{"a1", "a2", "a3", "b1", "b2", "b3"} {
		u := upstream(t, name)
		req := apiv1.RegisterRequest{InstanceID: "orders-" + name, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: u.URL, Zone: name[:1],
			Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
			Manifest:     &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: "orders-" + name, Version: "1.0.0"}, Routes: ordersRoutes}}
		if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		zoneOf[name] = name[:1]
	}
	sweep := func(d time.Duration) {
		e.reg.Clock.Advance(d)
		for _, name := range []string{"a1", "a2", "a3", "b1", "b2", "b3"} { // the leases hold
			rec, _ := e.reg.Store.Get("orders-" + name)
			e.reg.Registry.Heartbeat(context.Background(), rec.InstanceID, &apiv1.HeartbeatRequest{Generation: rec.Generation})
		}
		e.reg.Registry.Sweep(context.Background())
	}
	sweep(31 * time.Second) // past the slow start: all serve at 100
	// share sends n requests and returns the share of them that went to zone a
	share := func(n int) float64 {
		a := 0
		for range n {
			got := e.do(t, "GET", "/orders/1", "")
			if got.status != 200 {
				t.Fatalf("GET /orders/1 = %d %q", got.status, got.body)
			}
			if zoneOf[strings.Fields(got.body)[0]] == "a" {
				a++
			}
		}
		return float64(a) / float64(n)
	}
	registrytest.Until(t, "the route is served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	registrytest.Until(t, "all six serve at 100", func() bool { s := share(60); return s > 0.4 && s < 0.6 })

	start := time.Now()
	ev, err := e.reg.Registry.Evacuate(context.Background(), &apiv1.EvacuationRequest{Zone: "a", Duration: "1h", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	called := time.Since(start)
	registrytest.Until(t, "no request goes to zone a", func() bool { return share(30) == 0 })
	t.Logf("the evacuation call took %s; the gateway sent nothing to zone a %s after the call returned", called, time.Since(start)-called)
	if s := share(300); s != 0 {
		t.Fatalf("%.1f%% of 300 requests went to the evacuated zone", 100*s)
	}

	if _, err := e.reg.Registry.EndEvacuation(context.Background(), ev.ID); err != nil {
		t.Fatal(err)
	}
	// weights 10 in a against 100 in b: about 9 % of the requests, never half
	registrytest.Until(t, "zone a returns at weight 10", func() bool { s := share(330); return s > 0.02 && s < 0.2 })
	sweep(61 * time.Second) // 25 against 100: about 20 %
	registrytest.Until(t, "zone a at weight 25", func() bool { s := share(250); return s > 0.12 && s < 0.3 })
	sweep(2 * time.Minute) // the way back is over: serving at 100
	registrytest.Until(t, "zone a serving again", func() bool { s := share(60); return s > 0.4 && s < 0.6 })
}
