package storeindex_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/storeindex"
)

func record(id string) *registry.Record {
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://" + id,
		Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}},
		time.Now().Add(time.Minute))
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestHeldChangesShowTogether: changes made while the index is held apply at once, but the
// revision readers see — and their wake-up — waits for the last release, then moves past
// all of them; without a hold every change moves it.
func TestHeldChangesShowTogether(t *testing.T) {
	ix := storeindex.NewIndex()
	ix.Put(record("a"), 5)
	rev, wake := ix.Watch()
	if rev != 5 {
		t.Fatalf("revision %d after a put at 5", rev)
	}

	ix.Hold()
	ix.Hold() // holds nest
	ix.Put(record("b"), 6)
	ix.Touch(6)
	ix.Remove("a", nil, 6)
	if _, ok := ix.Get("b"); !ok {
		t.Error("a held put is not applied at once")
	}
	if got, _ := ix.Watch(); got != 5 || closed(wake) {
		t.Fatalf("while held: revision %d, woken %v; want 5 and asleep", got, closed(wake))
	}
	ix.Release()
	if got, _ := ix.Watch(); got != 5 || closed(wake) {
		t.Fatalf("after the inner release: revision %d, woken %v; want 5 and asleep", got, closed(wake))
	}
	ix.Release()
	rev, next := ix.Watch()
	if rev != 6 || !closed(wake) {
		t.Fatalf("after the last release: revision %d, woken %v; want 6 and woken", rev, closed(wake))
	}

	// a hold without changes wakes nobody; changes after it move the revision again
	ix.Hold()
	ix.Release()
	if closed(next) {
		t.Error("a hold without changes woke the watchers")
	}
	ix.Put(record("c"), 0)
	if got, _ := ix.Watch(); got != 7 || !closed(next) {
		t.Errorf("a put after the holds: revision %d, woken %v; want 7 and woken", got, closed(next))
	}
}

// TestPutNewer: a copy replaces an older incarnation, never one as new or newer (the store's
// own record of the same generation stays, pointer and all).
func TestPutNewer(t *testing.T) {
	at := func(gen int64) *registry.Record { r := record("a"); r.Generation = gen; return r }
	ix := storeindex.NewIndex()
	own := at(7)
	ix.Put(own, 7)
	for _, tc := range []struct {
		name   string
		rec    *registry.Record
		stored bool
	}{
		{"an older incarnation", at(3), false},
		{"a copy of the same one", at(7), false},
		{"a newer incarnation", at(9), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := ix.Get("a")
			if got := ix.PutNewer(tc.rec, tc.rec.Generation); got != tc.stored {
				t.Fatalf("PutNewer(generation %d) = %v, want %v", tc.rec.Generation, got, tc.stored)
			}
			want := before
			if tc.stored {
				want = tc.rec
			}
			if cur, _ := ix.Get("a"); cur != want {
				t.Errorf("the index holds generation %d, want %d", cur.Generation, want.Generation)
			}
		})
	}
	if rev, _ := ix.Watch(); rev != 9 {
		t.Errorf("revision %d, want 9 (a copy not stored moves nothing)", rev)
	}
}

// probedRecord is record(id) with a manifest that declares a health probe.
func probedRecord(id string) *registry.Record {
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://" + id,
		Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}},
		Manifest:     &apiv1.Manifest{Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "5s"}}},
		time.Now().Add(time.Minute))
}

// publishingRecord is record(id) with a capability that declares a public path: routed,
// not probed.
func publishingRecord(id string) *registry.Record {
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://" + id,
		Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p",
			Metadata: json.RawMessage(`{"public_paths":["/api/a"]}`)}}},
		time.Now().Add(time.Minute))
}

// TestRecordSets: the index keeps the records with a health probe, and those with a manifest
// or a public path, apart through every change: a put, a new incarnation with or without
// one, a removal, a reset.
func TestRecordSets(t *testing.T) {
	ix := storeindex.NewIndex()
	ids := func(recs []*registry.Record) []string {
		out := []string{}
		for _, rec := range recs {
			out = append(out, rec.InstanceID)
		}
		slices.Sort(out)
		return out
	}
	steps := []struct {
		name           string
		do             func()
		probed, routed []string
	}{
		{"puts", func() {
			ix.Put(probedRecord("p1"), 0)
			ix.Put(record("u1"), 0)
			ix.Put(probedRecord("p2"), 0)
			ix.Put(publishingRecord("w1"), 0)
		}, []string{"p1", "p2"}, []string{"p1", "p2", "w1"}},
		{"a new incarnation without a probe or a path", func() { ix.Put(record("p1"), 0) }, []string{"p2"}, []string{"p2", "w1"}},
		{"a new incarnation with a probe", func() { ix.Put(probedRecord("u1"), 0) }, []string{"p2", "u1"}, []string{"p2", "u1", "w1"}},
		{"a new incarnation with a path", func() { ix.Put(publishingRecord("p2"), 0) }, []string{"u1"}, []string{"p2", "u1", "w1"}},
		{"a removal", func() { ix.Remove("w1", nil, 0) }, []string{"u1"}, []string{"p2", "u1"}},
		{"a reset", func() {
			ix.Reset([]*registry.Record{record("a"), probedRecord("b"), probedRecord("c"), publishingRecord("d")}, 10)
		}, []string{"b", "c"}, []string{"b", "c", "d"}},
	}
	for _, st := range steps {
		st.do()
		if got := ids(ix.ProbedRecords()); !slices.Equal(got, st.probed) {
			t.Errorf("after %s: probed %q, want %q", st.name, got, st.probed)
		}
		if got := ids(ix.RoutedRecords()); !slices.Equal(got, st.routed) {
			t.Errorf("after %s: routed %q, want %q", st.name, got, st.routed)
		}
	}
}

// TestChangesAheadOfTheRevision: a change put ahead is read at once, but moves neither the
// revision nor its watchers until Reached says every write up to its revision is in; then
// the revision moves to the highest of those reached. A put at a revision already reached
// (the store saw the write first) notes nothing; Newest counts what is ahead; a reset's
// revision counts what it holds.
func TestChangesAheadOfTheRevision(t *testing.T) {
	ix := storeindex.NewIndex()
	ix.Put(record("a"), 5)
	ix.Reached(5)
	at := func(id string, gen int64) *registry.Record { r := record(id); r.Generation = gen; return r }
	steps := []struct {
		name        string
		do          func() // then Reached(reached)
		reached     int64
		rev, newest int64
		woken       bool
	}{
		{"nothing of ours", func() {}, 6, 5, 5, false},
		{"ours, not reached yet", func() { ix.PutAhead(at("b", 8), 8); ix.RemoveAhead("a", nil, 7) }, 6, 5, 8, false},
		{"a removal of nobody notes nothing", func() { ix.RemoveAhead("nobody", nil, 20) }, 6, 5, 8, false},
		{"the lower one reached", func() {}, 7, 7, 8, true},
		{"the other reached", func() {}, 9, 8, 8, true},
		{"seen first, then put ahead", func() {
			ix.PutNewer(at("c", 10), 10) // the watch's copy of the write
			ix.Reached(10)
			ix.PutAhead(at("c", 10), 10)
		}, 10, 10, 10, true},
		{"a reset's read past several", func() {
			ix.PutAhead(at("d", 12), 12)
			ix.Reset([]*registry.Record{at("b", 8), at("c", 10), at("d", 12)}, 13)
		}, 13, 13, 13, true},
	}
	for _, st := range steps {
		_, wake := ix.Watch()
		st.do()
		ix.Reached(st.reached)
		if rev, _ := ix.Watch(); rev != st.rev || ix.Newest() != st.newest || closed(wake) != st.woken {
			t.Errorf("%s: revision %d, newest %d, woken %v; want %d, %d, %v", st.name, rev, ix.Newest(), closed(wake), st.rev, st.newest, st.woken)
		}
	}
	if _, ok := ix.Get("b"); !ok {
		t.Error("a put ahead is not read")
	}
	if _, ok := ix.Get("a"); ok {
		t.Error("a removal ahead is not read")
	}
}

// TestHolds: the index holds a record from its put until a later incarnation of its instance
// replaces it, it is removed, or a reset leaves it out; another record of the same instance
// and content that was never put is never held.
func TestHolds(t *testing.T) {
	ix := storeindex.NewIndex()
	first, second, other, twin := record("a"), record("a"), record("b"), record("b")
	steps := []struct {
		name string
		do   func()
		held []*registry.Record
		not  []*registry.Record
	}{
		{"before any put", func() {}, nil, []*registry.Record{first, other}},
		{"puts", func() { ix.Put(first, 0); ix.Put(other, 0) }, []*registry.Record{first, other}, []*registry.Record{second, twin}},
		{"a new incarnation", func() { ix.Put(second, 0) }, []*registry.Record{second, other}, []*registry.Record{first}},
		{"a removal", func() { ix.Remove("b", nil, 0) }, []*registry.Record{second}, []*registry.Record{other}},
		{"a reset", func() { ix.Reset([]*registry.Record{first}, 5) }, []*registry.Record{first}, []*registry.Record{second, other}},
	}
	for _, st := range steps {
		st.do()
		for _, rec := range st.held {
			if !ix.Holds(rec) {
				t.Errorf("after %s: %s (%p) not held", st.name, rec.InstanceID, rec)
			}
		}
		for _, rec := range st.not {
			if ix.Holds(rec) {
				t.Errorf("after %s: %s (%p) held", st.name, rec.InstanceID, rec)
			}
		}
	}
}
