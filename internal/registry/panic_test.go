package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/prober"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// TestPanicLeavesOutTheNeverAdmitted: ten new incarnations, never probed, beside two serving
// ones neither push the group into panic nor get a share; once the two fail, the panic answer
// is the two, not the twelve. A brand-new service, none of whose members was ever admitted,
// is answered whole in panic.
func TestPanicLeavesOutTheNeverAdmitted(t *testing.T) {
	ctx := context.Background()
	reg, clock := judgingRegistry(t, health.Config{SlowStart: time.Nanosecond})
	clock.Advance(registry.DefaultLeaseTTL) // past the warm-up
	gens := map[string]int64{}
	register := func(id, capability string, probed bool) {
		t.Helper()
		req := registrytest.Orders(id, "http://10.0.0.1:8080")
		req.Capabilities[0].CapabilityID = capability
		if probed { // a declared health check: unknown (ADMITTING) until its probes admit it
			req.Manifest.Health = &apiv1.ManifestHealth{Path: "/healthz", Interval: "5s", UnhealthyAfter: apiv1.Int(1)}
		}
		resp, err := reg.Register(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		gens[id] = resp.Generation
	}
	sweep := func() { sweepAfter(t, reg, clock, time.Second) }
	answer := func(capability string, all bool) (ids []string, panics int) {
		t.Helper()
		a := reg.Query(&registry.Query{CapabilityID: capability, IncludeAll: all})
		for _, e := range a.Entries {
			ids = append(ids, fmt.Sprintf("%s:%s:%d", e.Record.InstanceID, e.Eligibility, e.Weight))
			if e.Panic {
				panics++
			}
		}
		return ids, panics
	}
	register("old-1", "orders.write", false) // no probe class: admitted at registration
	register("old-2", "orders.write", false)
	sweep()
	for i := range 10 {
		register(fmt.Sprintf("new-%02d", i), "orders.write", true)
	}
	sweep()
	if ids, panics := answer("orders.write", false); len(ids) != 2 || panics != 0 {
		t.Errorf("two serving, ten never admitted: answer %v with %d in panic, want the two, no panic", ids, panics)
	}
	if ids, panics := answer("orders.write", true); len(ids) != 12 || panics != 0 {
		t.Errorf("include=all: %v with %d in panic, want all twelve, none in panic", ids, panics)
	}
	// The two fail (their self-reports): the group panics with its members, not the new ones.
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := reg.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: gens[id], Health: apiv1.HealthFailing}); err != nil {
			t.Fatal(err)
		}
	}
	sweep()
	if ids, panics := answer("orders.write", false); len(ids) != 2 || panics != 2 {
		t.Errorf("both members failing: answer %v with %d in panic, want the two members in panic", ids, panics)
	}

	// A brand-new service: no member ever admitted, all of them in the panic answer.
	for i := range 3 {
		register(fmt.Sprintf("fresh-%d", i), "orders.fresh", true)
	}
	sweep()
	if ids, panics := answer("orders.fresh", false); len(ids) != 3 || panics != 3 {
		t.Errorf("a brand-new service: answer %v with %d in panic, want all three in panic", ids, panics)
	}
}

// TestRefusedBeforeAdmissionIsGone: during the warm-up after a restart, an incarnation never
// admitted whose probe is refused (its provider died while the registry was down) leaves
// every answer — discovery and routes — and is listed as removed, so that views merged from
// what consumers knew drop it; the live one stays, and an ok probe brings a refused one back.
func TestRefusedBeforeAdmissionIsGone(t *testing.T) {
	ctx := context.Background()
	reg, clock := judgingRegistry(t, health.Config{})
	gens := map[string]int64{}
	for _, id := range []string{"alive", "dead"} {
		req := registrytest.Orders(id, "http://10.0.0.1:8080")
		req.Manifest.Health = &apiv1.ManifestHealth{Path: "/healthz", Interval: "5s", UnhealthyAfter: apiv1.Int(3)}
		resp, err := reg.Register(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		gens[id] = resp.Generation
	}
	sweep := func() { sweepAfter(t, reg, clock, time.Second) }
	sweep()
	probe := func(id, result string) {
		reg.ReportProbe(prober.Result{Target: prober.Target{ID: id, Generation: gens[id]}, At: clock.Now(), Result: result})
		sweep()
	}
	probe("dead", health.ProbeRefused)
	a := reg.Query(&registry.Query{CapabilityID: "orders.write", IncludeAll: true})
	if a.Complete {
		t.Fatal("the registry is not warming up")
	}
	var ids []string
	for _, e := range a.Entries {
		ids = append(ids, e.Record.InstanceID)
	}
	if len(ids) != 1 || ids[0] != "alive" {
		t.Errorf("discovery answers %v, want only alive (dead's probe was refused)", ids)
	}
	if len(a.Removed) != 1 || a.Removed[0].InstanceID != "dead" || a.Removed[0].Generation != gens["dead"] {
		t.Errorf("removed %+v, want dead at its generation", a.Removed)
	}
	routes := reg.Routes()
	if len(routes.Manifests) != 1 || routes.Manifests[0].InstanceID != "alive" || len(routes.Removed) != 1 || routes.Removed[0].InstanceID != "dead" {
		t.Errorf("routes: manifests %d (%+v), removed %+v; want alive's only and dead removed", len(routes.Manifests), routes.Manifests, routes.Removed)
	}
	if exp, err := reg.Explain("dead"); err != nil || exp.State != apiv1.EligibilityWithdrawn {
		t.Errorf("dead's verdict %+v %v, want withdrawn", exp, err)
	}
	probe("dead", health.ProbeOK) // it listens after all: waiting for admission again
	if a := reg.Query(&registry.Query{CapabilityID: "orders.write", IncludeAll: true}); len(a.Entries) != 2 || len(a.Removed) != 0 {
		t.Errorf("after an ok probe: %d entries, removed %+v; want both, none removed", len(a.Entries), a.Removed)
	}
}

// judgingRegistry is a registry with the eligibility engine (cfg) over a memory store, on a
// fake clock at Epoch0: warming up until the clock passes a lease TTL.
func judgingRegistry(t *testing.T, cfg health.Config) (*registry.Registry, *registrytest.Clock) {
	t.Helper()
	clock := registrytest.NewClock(registrytest.Epoch0)
	m, err := health.NewMonitor(health.MonitorConfig{Engine: cfg})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(memstore.New(clock.Now), registry.Config{Now: clock.Now, Registerer: prometheus.NewRegistry(), Eligibility: m})
	if err != nil {
		t.Fatal(err)
	}
	return reg, clock
}

// sweepAfter advances clock by d and sweeps reg.
func sweepAfter(t *testing.T, reg *registry.Registry, clock *registrytest.Clock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	if _, err := reg.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}
