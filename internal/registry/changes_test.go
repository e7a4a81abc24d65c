package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// toldStore is a memory store that a writer other than the registry changes, telling the
// registry what it changed (registry.ChangeNotifier), as the etcd store tells a replica what
// the others changed.
type toldStore struct {
	*memstore.Store
	tell func(id string)
}

func (s *toldStore) OnChanged(fn func(id string)) { s.tell = fn }

// toldRegistry is a registry with the eligibility engine over a toldStore, on a fake clock.
func toldRegistry(tb testing.TB) (*registry.Registry, *toldStore, *registrytest.Clock) {
	tb.Helper()
	clock := registrytest.NewClock(registrytest.Epoch0)
	store := &toldStore{Store: memstore.New(clock.Now)}
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := registry.New(store, registry.Config{Now: clock.Now, Registerer: prometheus.NewRegistry(), Eligibility: m})
	if err != nil {
		tb.Fatal(err)
	}
	return reg, store, clock
}

// TestSweepTakesWhatTheStoreSaysChanged: over a store that says what it changed, a sweep
// hands the eligibility monitor the instances it named — registered, with a new self-report,
// removed — and not the rest of the fleet; the fleet is walked only when the store says it
// read its whole view anew. Without that, a replica over etcd walked its whole fleet at every
// sweep its store's revision moved (37 ms at 60,000 instances, BenchmarkEligibilityWalk).
func TestSweepTakesWhatTheStoreSaysChanged(t *testing.T) {
	ctx := context.Background()
	reg, store, clock := toldRegistry(t)
	if store.tell == nil {
		t.Fatal("the registry did not ask the store to tell its changes")
	}
	sweep := func() {
		t.Helper()
		clock.Advance(time.Second)
		if _, err := reg.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweep() // the first sweep walks the (empty) fleet, as after every start
	elsewhere := func(id string) *registry.Record {
		t.Helper()
		rec := registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080",
			Zone: "a", Health: apiv1.HealthOK, Capabilities: []apiv1.Capability{capability("messaging.publish", "jms", "1.0.0", "")}},
			clock.Now().Add(time.Minute))
		if err := store.Register(ctx, rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	held := func(id string) bool {
		t.Helper()
		_, err := reg.Explain(id)
		if err != nil && !errors.Is(err, registry.ErrInstanceNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	told := elsewhere("told")
	elsewhere("untold")
	store.tell("told")
	sweep()
	if !held("told") {
		t.Error("an instance the store said it registered is not judged after the sweep")
	}
	if held("untold") {
		t.Error("the sweep walked the fleet: it judged an instance the store did not name")
	}

	before, _ := reg.Explain("told")
	told.SetHealth(apiv1.HealthFailing)
	store.tell("told")
	sweep()
	after, _ := reg.Explain("told")
	if after.State == before.State {
		t.Errorf("a self-report of failing the store said it took left the verdict at %s", after.State)
	}

	if _, err := store.Deregister(ctx, "told", told.Generation); err != nil {
		t.Fatal(err)
	}
	store.tell("told")
	sweep()
	if held("told") {
		t.Error("an instance the store said it removed is still judged after the sweep")
	}

	store.tell("") // the store read its whole view anew
	sweep()
	if !held("untold") {
		t.Error("the sweep after the store read its whole view anew did not walk the fleet")
	}
}

// BenchmarkEligibilityChanges is a sweep of -fleet instances (60,000) over a store that says
// what it changed, 100 of them with a new self-report each time: what a replica over etcd
// pays per sweep for what the other replicas changed, where it walked the fleet before
// (BenchmarkEligibilityWalk).
func BenchmarkEligibilityChanges(b *testing.B) {
	ctx := context.Background()
	reg, store, clock := toldRegistry(b)
	recs := make([]*registry.Record, *fleet)
	for i := range recs {
		req := benchRequest(i)
		if _, err := reg.Register(ctx, req); err != nil {
			b.Fatal(err)
		}
		recs[i], _ = store.Get(req.InstanceID)
	}
	clock.Advance(31 * time.Second)
	if _, err := reg.Sweep(ctx); err != nil {
		b.Fatal(err)
	}
	health := []string{apiv1.HealthOK, apiv1.HealthDegraded}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		for range 100 {
			rec := recs[i%len(recs)]
			rec.SetHealth(health[(i/len(recs))%2])
			store.tell(rec.InstanceID)
			i++
		}
		clock.Advance(100 * time.Microsecond)
		if _, err := reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
