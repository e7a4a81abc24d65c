package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
	"github.com/meshflows/meshflows/internal/store/storetest"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// startEtcd runs a single-member etcd on loopback for the test and returns a client.
func startEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	return etcdtest.Start(t).Client
}

// startEtcdServer is startEtcd that also returns a func that stops the server (once; the
// test's end stops it too).
func startEtcdServer(t testing.TB) (*clientv3.Client, func()) {
	t.Helper()
	s := etcdtest.Start(t)
	return s.Client, s.Stop
}

var prefixes atomic.Int64

// newStore connects a store under a prefix of its own and runs it until the test ends.
func newStore(t testing.TB, cli *clientv3.Client, ttl time.Duration) *etcdstore.Store {
	t.Helper()
	return runStore(t, etcdstore.Config{Client: cli, Prefix: fmt.Sprintf("/t%d/", prefixes.Add(1)), LeaseTTL: ttl})
}

// runStore connects a store with cfg and runs it until the test ends.
func runStore(t testing.TB, cfg etcdstore.Config) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// replicas returns a func that starts one more store replica over a prefix of its own (named
// after name), running until the test ends, and the prefix.
func replicas(t testing.TB, cli *clientv3.Client, name string) (open func() *etcdstore.Store, prefix string) {
	t.Helper()
	prefix = fmt.Sprintf("/%s%d/", name, prefixes.Add(1))
	return func() *etcdstore.Store {
		return runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	}, prefix
}

func TestStoreSuite(t *testing.T) {
	cli := startEtcd(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) registry.Store {
		return newStore(t, cli, time.Minute)
	}, storetest.Options{RealTimeLeases: true, NoRestore: true})
}

func record(id string) *registry.Record {
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://" + id,
		Health: "ok", Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}},
		time.Now().Add(time.Minute))
}

func TestLeaseExpiryIsAnEviction(t *testing.T) {
	cli := startEtcd(t)
	s := newStore(t, cli, 2*time.Second)
	ctx := context.Background()
	gone, kept := record("gone"), record("kept")
	s.Register(ctx, gone)
	s.Register(ctx, kept)
	if _, err := s.Deregister(ctx, "kept", kept.Generation); err != nil {
		t.Fatal(err)
	}
	var evicted []*registry.Record
	registrytest.Until(t, "the lease expires", func() bool {
		ev, _ := s.Expire(ctx, time.Now())
		evicted = append(evicted, ev...)
		return len(evicted) > 0
	})
	if len(evicted) != 1 || evicted[0].InstanceID != "gone" {
		t.Errorf("evicted %v, want only gone (kept was deregistered, not evicted)", evicted)
	}
	if _, ok := s.Get("gone"); ok {
		t.Error("gone is still in the view")
	}
}

// TestTwoReplicas: two stores on one prefix, as two registry replicas over one cluster.
func TestTwoReplicas(t *testing.T) {
	cli := startEtcd(t)
	open, _ := replicas(t, cli, "shared")
	a, b := open(), open()
	if a.Epoch().ID != b.Epoch().ID || !a.Epoch().Start.Equal(b.Epoch().Start) {
		t.Fatalf("epochs %+v and %+v: one cluster has one epoch, created once", a.Epoch(), b.Epoch())
	}
	ctx := context.Background()
	_, wake := b.Watch()
	rec := record("x")
	if err := a.Register(ctx, rec); err != nil {
		t.Fatal(err)
	}
	select { // a long poll on B is woken by a write on A
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("B's watchers were not woken by A's write")
	}
	registrytest.Until(t, "B sees the instance", func() bool { got, ok := b.Get("x"); return ok && got.Generation == rec.Generation })
	if _, err := b.Heartbeat(ctx, "x", rec.Generation, "ok", time.Now().Add(time.Minute)); err != nil {
		t.Errorf("heartbeat on B: %v", err)
	}
	// fencing across replicas: B re-registers, A's late deregister of the old generation fails
	rec2 := record("x")
	if err := b.Register(ctx, rec2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Deregister(ctx, "x", rec.Generation); !errors.Is(err, registry.ErrGenerationMismatch) {
		t.Errorf("late deregister on A = %v, want ErrGenerationMismatch", err)
	}
	// a replica restarted later keeps the epoch and sees the state: no re-registration storm
	c := open()
	if c.Epoch().ID != a.Epoch().ID {
		t.Error("a restarted replica got a new epoch")
	}
	if got, ok := c.Get("x"); !ok || got.Generation != rec2.Generation {
		t.Errorf("restarted replica's view: %+v %v", got, ok)
	}
	registrytest.Until(t, "one replica is elected", func() bool { return a.Leader() || b.Leader() || c.Leader() })
	if n := btoi(a.Leader()) + btoi(b.Leader()) + btoi(c.Leader()); n != 1 {
		t.Errorf("%d leaders", n)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestLeadershipMovesWhenTheLeaderGoes(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/elect%d/", prefixes.Add(1))
	type replica struct {
		s      *etcdstore.Store
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *replica {
		s, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix, ReplicaID: id})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{s: s, cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a, b := start("a"), start("b")
	registrytest.Until(t, "a leader", func() bool { return a.s.Leader() || b.s.Leader() })
	lead, other := a, b
	if b.s.Leader() {
		lead, other = b, a
	}
	lead.cancel() // the leader's replica stops: it resigns
	<-lead.done
	lead.done <- nil
	registrytest.Until(t, "the other replica takes over", other.s.Leader)
}

// TestResyncAfterCompaction: a replica whose watch resumes from a revision etcd has
// compacted away reads a complete view again instead of missing the changes.
func TestResyncAfterCompaction(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/compact%d/", prefixes.Add(1))
	lagging, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		if err := writer.Register(ctx, record(fmt.Sprintf("late-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- lagging.Run(rctx) }() // its watch starts before the compaction point
	defer func() { cancel(); <-done }()
	registrytest.Until(t, "the lagging replica resyncs", func() bool { n, _ := lagging.Counts(); return n == 5 })
}

// TestDeregisterThroughAReplicaThatHasNotSeenIt: the record a deregistration returns (what
// the registry logs) names the service even when this replica's view has not seen the
// registration yet — it is read from what the deregistration replaced — and its lease is
// revoked.
func TestDeregisterThroughAReplicaThatHasNotSeenIt(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/unseen%d/", prefixes.Add(1))
	behind, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// not run: its view stays as it was read
	a := runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	rec := record("x")
	if err := a.Register(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	got, err := behind.Deregister(context.Background(), "x", rec.Generation)
	if err != nil {
		t.Fatal(err)
	}
	if got.ServiceName != "svc" || got.Generation != rec.Generation {
		t.Fatalf("deregistered record %+v, want service svc, generation %d", got, rec.Generation)
	}
	registrytest.Until(t, "the other replica drops it", func() bool { _, ok := a.Get("x"); return !ok })
	resp, err := cli.Get(context.Background(), prefix+"instances/x")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the record's key is still there (lease not revoked): %v %v", resp, err)
	}
}

// TestHealthAcrossIncarnations: a registration's health travels in its record, not in a
// health key of its own; a heartbeat that changes the health writes one. A re-registration
// deletes the previous incarnation's health key in its transaction, so no replica — the
// writer, one that follows the watch, one that starts later — answers the old health for the
// new incarnation.
func TestHealthAcrossIncarnations(t *testing.T) {
	cli := startEtcd(t)
	open, prefix := replicas(t, cli, "health")
	a, b := open(), open()
	ctx := context.Background()
	healthKeys := func() int64 {
		resp, err := cli.Get(ctx, prefix+"health/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	healthOn := func(s *etcdstore.Store, gen int64) string {
		if rec, ok := s.Get("x"); ok && rec.Generation == gen {
			return rec.Health()
		}
		return ""
	}
	steps := []struct {
		name       string
		register   bool
		heartbeat  string // the health a heartbeat reports, after any registration
		wantHealth string
		wantKeys   int64
	}{
		{name: "registered", register: true, wantHealth: apiv1.HealthOK, wantKeys: 0},
		{name: "degraded by a heartbeat", heartbeat: apiv1.HealthDegraded, wantHealth: apiv1.HealthDegraded, wantKeys: 1},
		{name: "registered again", register: true, wantHealth: apiv1.HealthOK, wantKeys: 0},
		{name: "degraded again", heartbeat: apiv1.HealthDegraded, wantHealth: apiv1.HealthDegraded, wantKeys: 1},
		{name: "ok again", heartbeat: apiv1.HealthOK, wantHealth: apiv1.HealthOK, wantKeys: 1},
	}
	var gen int64
	for _, st := range steps {
		if st.register {
			rec := record("x")
			if err := a.Register(ctx, rec); err != nil {
				t.Fatal(err)
			}
			gen = rec.Generation
		}
		if st.heartbeat != "" {
			if _, err := a.Heartbeat(ctx, "x", gen, st.heartbeat, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		registrytest.Until(t, st.name+": the writer and the other replica follow", func() bool {
			return healthOn(a, gen) == st.wantHealth && healthOn(b, gen) == st.wantHealth
		})
		if got := healthOn(open(), gen); got != st.wantHealth {
			t.Errorf("%s: a replica started now answers %q, want %q", st.name, got, st.wantHealth)
		}
		if got := healthKeys(); got != st.wantKeys {
			t.Errorf("%s: %d health keys in etcd, want %d", st.name, got, st.wantKeys)
		}
	}
}
