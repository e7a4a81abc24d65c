package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

func testRecord(id, endpoint string) *registry.Record {
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: endpoint,
		Health: "ok", Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}},
		time.Now().Add(time.Minute))
}

// notRunning is a store under prefix on an etcd of its own, whose Run the test does not start:
// the test drives the committer and the watch itself.
func notRunning(t *testing.T, prefix string) (*Store, *clientv3.Client) {
	t.Helper()
	cli := etcdtest.Start(t).Client
	s, err := New(context.Background(), Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s, cli
}

// TestRegistrationsWaitingTogetherAreWrittenTogether: before the writer runs a registration
// writes alone; registrations queued while none is being written go out in one transaction — one generation for all, each readable, each
// fenced by it — except a second registration of an instance already in the batch, which
// goes in the next one and wins; once the writer has stopped, a registration fails at once.
func TestRegistrationsWaitingTogetherAreWrittenTogether(t *testing.T) {
	ctx := context.Background()
	s, cli := notRunning(t, "/commit/")
	// Before the writer runs, a registration writes alone.
	solo := testRecord("solo", "http://solo")
	if err := s.Register(ctx, solo); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Get("solo"); !ok || got != solo || solo.Generation == 0 {
		t.Fatalf("a registration before the writer runs: in the index %+v %v, generation %d", got, ok, solo.Generation)
	}
	// Queue eleven registrations before the writer runs: the ten of x-0…x-9, then x-3 again.
	var waiting []*registration
	queue := func(id, endpoint string) *registration {
		rec := testRecord(id, endpoint)
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		w := s.newRegistration(rec, `{"instance_id":"`+id+`","service_name":"svc","service_version":"1.0.0","endpoint":"`+endpoint+`"}`, lease.ID)
		s.commits.queue <- w
		waiting = append(waiting, w)
		return w
	}
	for i := range 10 {
		queue(fmt.Sprint("x-", i), "http://first")
	}
	again := queue("x-3", "http://second")

	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); s.runCommitter(rctx) }()
	var outcomes []committed
	for _, w := range waiting {
		c := <-w.done
		if c.err != nil {
			t.Fatalf("registration of %s: %v", w.rec.InstanceID, c.err)
		}
		outcomes = append(outcomes, c)
	}
	batch := outcomes[0].rev
	for i, c := range outcomes[:10] {
		if c.rev != batch {
			t.Errorf("x-%d written at revision %d, the batch at %d: not one transaction", i, c.rev, batch)
		}
		if got, ok := s.Get(fmt.Sprint("x-", i)); !ok || (i != 3 && got.Generation != batch) {
			t.Errorf("x-%d in the index: %+v %v", i, got, ok)
		}
	}
	if c := outcomes[10]; c.rev <= batch || c.prev == nil || c.prev.ModRevision != batch {
		t.Errorf("the second registration of x-3: revision %d, replacing %+v; want a later transaction replacing the batch's", c.rev, c.prev)
	}
	if got, _ := s.Get("x-3"); got == nil || got.Generation != again.rec.Generation || got.Endpoint != "http://second" {
		t.Errorf("x-3 in the index: %+v, want the second registration", got)
	}
	// The revision follows the watch, which does not run here (Index.PutAhead); the generation
	// counts the writes.
	if rev, _ := s.Watch(); rev >= batch {
		t.Errorf("with no watch the revision is %d: it shows the batch of %d before every write up to it is in", rev, batch)
	}
	if g := s.Generation(); g != outcomes[10].rev {
		t.Errorf("Generation() = %d, want the last write's %d", g, outcomes[10].rev)
	}
	// The shared generation fences each instance by its own key.
	if _, err := s.Deregister(ctx, "x-5", batch); err != nil {
		t.Errorf("deregistering x-5 at the batch's generation: %v", err)
	}
	if _, err := s.Deregister(ctx, "x-3", batch); !errors.Is(err, registry.ErrGenerationMismatch) {
		t.Errorf("deregistering x-3 at the replaced generation = %v, want ErrGenerationMismatch", err)
	}

	cancel()
	<-stopped
	rec := testRecord("late", "http://late")
	done := make(chan error, 1)
	go func() { done <- s.Register(ctx, rec) }()
	select {
	case err := <-done:
		if !errors.Is(err, errStopped) {
			t.Errorf("registering after the writer stopped = %v, want errStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a registration after the writer stopped hangs")
	}
}

// TestTheWatchTakesOwnRegistrationsAsMade: the watch brings a registration back before its
// commit returns (etcd notifies watchers before it answers). The view then takes the
// registry's own record, dated with the transaction's revision, without decoding its JSON
// and without telling the registry of a change made elsewhere; the commit finds it there. A
// write of the same key under another lease (an earlier incarnation, another replica's) is
// decoded as before; after a resync the commit puts the registry's record back over the
// decoded copy; a registration whose transaction failed but which the watch brought in is
// told to the registry as a change.
func TestTheWatchTakesOwnRegistrationsAsMade(t *testing.T) {
	ctx := context.Background()
	s, cli := notRunning(t, "/own/")
	var changed []string
	s.OnChanged(func(id string) { changed = append(changed, id) })
	// write commits w's operations as commitBatch does, without telling w its outcome, and
	// returns the key as the watch brings it.
	write := func(w *registration) *mvccpb.KeyValue {
		t.Helper()
		if _, err := cli.Txn(ctx).Then(w.ops[:]...).Commit(); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, w.key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("reading %s back: %v %v", w.key, resp, err)
		}
		return resp.Kvs[0]
	}
	register := func(id, endpoint string) *registration {
		t.Helper()
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		rec := testRecord(id, endpoint)
		in := rec.Instance()
		in.Generation = 0
		val, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		return s.newRegistration(rec, string(val), lease.ID)
	}
	watch := func(kv *mvccpb.KeyValue) {
		s.applyAll([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv}})
	}
	inView := func(id string) *registry.Record {
		t.Helper()
		got, ok := s.Get(id)
		if !ok {
			t.Fatalf("%s is not in the view", id)
		}
		return got
	}

	// brought is a registration of id held and committed, which the watch then brings in
	// before the commit returns.
	brought := func(id string) (*registration, *mvccpb.KeyValue) {
		t.Helper()
		w := register(id, "http://"+id)
		s.hold([]*registration{w})
		kv := write(w)
		watch(kv)
		return w, kv
	}

	t.Run("the watch first", func(t *testing.T) {
		changed = nil
		w, kv := brought("early")
		if got := inView("early"); got != w.rec || got.Generation != kv.ModRevision {
			t.Errorf("after the watch: the view holds %p at generation %d, want the registry's record %p at %d", got, got.Generation, w.rec, kv.ModRevision)
		}
		if rev, _ := s.Watch(); rev != kv.ModRevision {
			t.Errorf("the revision is %d, want the write's %d", rev, kv.ModRevision)
		}
		s.settle([]*registration{w}, kv.ModRevision)
		if got := inView("early"); got != w.rec {
			t.Errorf("after the commit: the view holds %p, want the registry's record %p", got, w.rec)
		}
		if len(changed) != 0 || len(s.pending) != 0 {
			t.Errorf("told the registry of %q, %d registrations still held; want none of either", changed, len(s.pending))
		}
	})

	t.Run("another lease's write is decoded", func(t *testing.T) {
		changed = nil
		mine := register("twice", "http://mine")
		s.hold([]*registration{mine})
		other := register("twice", "http://other") // the same key under a lease of its own
		watch(write(other))
		if got := inView("twice"); got == mine.rec || got == other.rec || got.Endpoint != "http://other" {
			t.Errorf("the view holds %+v, want a copy decoded from the other write", got)
		}
		if s.inView(mine) || len(changed) != 1 || changed[0] != "twice" {
			t.Errorf("held registration in the view: %v; told the registry of %q, want [twice]", s.inView(mine), changed)
		}
		s.drop([]*registration{mine})
	})

	t.Run("a resync in between", func(t *testing.T) {
		changed = nil
		w, kv := brought("resynced")
		if err := s.resync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := inView("resynced"); got == w.rec {
			t.Fatal("the resync kept the registry's record: the test shows nothing")
		}
		s.settle([]*registration{w}, kv.ModRevision)
		if got := inView("resynced"); got != w.rec || got.Generation != kv.ModRevision {
			t.Errorf("after the commit: the view holds %p at generation %d, want the registry's record %p at %d", got, got.Generation, w.rec, kv.ModRevision)
		}
	})

	t.Run("a failed commit the watch brought in", func(t *testing.T) {
		changed = nil
		w, _ := brought("lost")
		s.drop([]*registration{w})
		if len(changed) != 1 || changed[0] != "lost" || len(s.pending) != 0 {
			t.Errorf("told the registry of %q with %d held, want [lost] and none", changed, len(s.pending))
		}
	})
}
