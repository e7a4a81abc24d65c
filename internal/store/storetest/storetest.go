// Package storetest is the behaviour suite every registry.Store must pass: generations,
// replacement, fencing, leases, expiry, indexes, revisions and watches, restore. A store's
// own test calls Run with a constructor.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// NewStore returns an empty store whose clock is now.
type NewStore func(t *testing.T, now func() time.Time) registry.Store

var t0 = time.Date(2026, 4, 27, 8, 15, 0, 0, time.UTC)

// Record builds a valid record for instance id of service with the capabilities given as
// "capability_id/provider@version".
func Record(t testing.TB, id, service string, caps ...string) *registry.Record {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080"}
	for _, c := range caps {
		i, j := slices.Index([]byte(c), '/'), slices.Index([]byte(c), '@')
		cid, prov, ver := c[:i], c[i+1:j], c[j+1:]
		req.Capabilities = append(req.Capabilities, apiv1.Capability{CapabilityID: cid, Provider: prov, CapabilityVersion: ver, ContractSchemaVersion: "1.0"})
	}
	if err := req.Validate(); err != nil {
		t.Fatalf("Record(%s): %v", id, err)
	}
	return registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0",
		Endpoint: req.Endpoint, Capabilities: req.Capabilities, Health: apiv1.HealthOK, RegisteredAt: t0}, t0.Add(time.Minute))
}

func ids(es []registry.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Record.InstanceID+"/"+e.Capability().CapabilityID)
	}
	slices.Sort(out)
	return out
}

// Options says what a store under test can and cannot do.
type Options struct {
	// RealTimeLeases: leases expire in real time (etcd), not by the clock given to Expire;
	// the expiry test is the store's own.
	RealTimeLeases bool
	// NoRestore: the store keeps its own state and refuses Restore.
	NoRestore bool
}

// closedWithin waits until ch is closed: stores that learn of their own changes from a
// watch close it a moment later. The bound only ends a broken test.
func closedWithin(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// registered returns the revision once it shows rec's registration (reaches its generation),
// and its channel. A store whose revision follows a watch shows it a moment after Register
// returns (registry.Store.Register).
func registered(s registry.Store, rec *registry.Record) (int64, <-chan struct{}) {
	for {
		rev, changed := s.Watch()
		if rev >= rec.Generation {
			return rev, changed
		}
		if !closedWithin(changed) {
			return rev, changed // the assertions that follow say what is wrong
		}
	}
}

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore, opts Options) {
	ctx := context.Background()
	now := func() time.Time { return t0 }

	t.Run("generations increase and replace", func(t *testing.T) {
		s := newStore(t, now)
		a, b, a2 := Record(t, "a", "svc", "x.y/p@1.0.0"), Record(t, "b", "svc", "x.y/p@1.0.0"), Record(t, "a", "svc", "x.y/p@2.0.0")
		for _, r := range []*registry.Record{a, b, a2} {
			if err := s.Register(ctx, r); err != nil {
				t.Fatalf("Register(%s): %v", r.InstanceID, err)
			}
		}
		if !(a.Generation < b.Generation && b.Generation < a2.Generation) {
			t.Errorf("generations a=%d b=%d a2=%d, want strictly increasing", a.Generation, b.Generation, a2.Generation)
		}
		if got, _ := s.Get("a"); got != a2 {
			t.Errorf("Get(a) is not the replacement")
		}
		if n, c := s.Counts(); n != 2 || c != 2 {
			t.Errorf("Counts() = %d, %d, want 2, 2", n, c)
		}
		if got := s.Generation(); got != a2.Generation {
			t.Errorf("Generation() = %d, want %d", got, a2.Generation)
		}
		if got := ids(s.Query(&registry.Query{CapabilityID: "x.y"})); !slices.Equal(got, []string{"a/x.y", "b/x.y"}) {
			t.Errorf("Query after replace = %v", got)
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		s := newStore(t, now)
		a := Record(t, "a", "svc", "x.y/p@1.0.0")
		s.Register(ctx, a)
		rev, changed := registered(s, a)
		exp := t0.Add(5 * time.Minute)
		if _, err := s.Heartbeat(ctx, "a", a.Generation, apiv1.HealthOK, exp); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		if got := a.LeaseExpiresAt(); !got.Equal(exp) {
			t.Errorf("lease = %v, want %v", got, exp)
		}
		if r2, _ := s.Watch(); r2 != rev {
			t.Errorf("a heartbeat that changes nothing visible moved the revision %d -> %d", rev, r2)
		}
		if _, err := s.Heartbeat(ctx, "a", a.Generation, apiv1.HealthDegraded, exp); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		if !closedWithin(changed) {
			t.Errorf("a change of health did not close the watch channel")
		}
		if r2, _ := s.Watch(); r2 <= rev {
			t.Errorf("revision after a health change = %d, want > %d", r2, rev)
		}
		if _, err := s.Heartbeat(ctx, "nobody", 1, apiv1.HealthOK, exp); !errors.Is(err, registry.ErrInstanceNotFound) {
			t.Errorf("Heartbeat(unknown) = %v, want ErrInstanceNotFound", err)
		}
		if _, err := s.Heartbeat(ctx, "a", a.Generation+100, apiv1.HealthOK, exp); !errors.Is(err, registry.ErrGenerationMismatch) {
			t.Errorf("Heartbeat(wrong generation) = %v, want ErrGenerationMismatch", err)
		}
	})

	t.Run("deregister fencing", func(t *testing.T) {
		s := newStore(t, now)
		old := Record(t, "a", "svc", "x.y/p@1.0.0")
		s.Register(ctx, old)
		cur := Record(t, "a", "svc", "x.y/p@1.0.0")
		s.Register(ctx, cur)
		if _, err := s.Deregister(ctx, "a", old.Generation); !errors.Is(err, registry.ErrGenerationMismatch) {
			t.Fatalf("late Deregister of the old incarnation = %v, want ErrGenerationMismatch", err)
		}
		if _, ok := s.Get("a"); !ok {
			t.Fatal("the late deregister removed the new incarnation")
		}
		if _, err := s.Deregister(ctx, "a", cur.Generation); err != nil {
			t.Fatalf("Deregister(current): %v", err)
		}
		if _, err := s.Deregister(ctx, "a", 0); !errors.Is(err, registry.ErrInstanceNotFound) {
			t.Errorf("Deregister(gone) = %v, want ErrInstanceNotFound", err)
		}
		if n, c := s.Counts(); n != 0 || c != 0 {
			t.Errorf("Counts() = %d, %d after deregister, want 0, 0", n, c)
		}
		if got := s.Query(&registry.Query{ServiceName: "svc"}); len(got) != 0 {
			t.Errorf("Query after deregister = %v, want nothing", ids(got))
		}
	})

	t.Run("expire", func(t *testing.T) {
		if opts.RealTimeLeases {
			t.Skip("leases expire in real time in this store; its own tests cover expiry")
		}
		s := newStore(t, now)
		a, b := Record(t, "a", "svc", "x.y/p@1.0.0"), Record(t, "b", "svc", "x.y/p@1.0.0")
		s.Register(ctx, a)
		s.Register(ctx, b)
		s.Heartbeat(ctx, "b", b.Generation, apiv1.HealthOK, t0.Add(10*time.Minute))
		gone, err := s.Expire(ctx, t0.Add(59*time.Second))
		if err != nil || len(gone) != 0 {
			t.Fatalf("Expire before the lease ends = %d records, %v", len(gone), err)
		}
		rev, _ := s.Watch()
		gone, err = s.Expire(ctx, t0.Add(time.Minute))
		if err != nil || len(gone) != 1 || gone[0] != a {
			t.Fatalf("Expire at the lease end = %v, %v; want a", gone, err)
		}
		if r2, _ := s.Watch(); r2 <= rev {
			t.Errorf("eviction did not move the revision")
		}
		if _, ok := s.Get("a"); ok {
			t.Errorf("a is still there after expiry")
		}
	})

	t.Run("query indexes", func(t *testing.T) {
		s := newStore(t, now)
		s.Register(ctx, Record(t, "a1", "alpha", "messaging.publish/jms@1.0.0", "messaging.consume/jms@1.0.0"))
		s.Register(ctx, Record(t, "a2", "alpha", "messaging.publish/jms@2.0.0"))
		s.Register(ctx, Record(t, "b1", "beta", "messaging.publish/rabbitmq@1.5.0"))
		c, _ := registry.ParseConstraint(">=1.0 <2.0")
		tests := []struct {
			name string
			q    registry.Query
			want []string
		}{
			{"all", registry.Query{}, []string{"a1/messaging.consume", "a1/messaging.publish", "a2/messaging.publish", "b1/messaging.publish"}},
			{"capability", registry.Query{CapabilityID: "messaging.publish"}, []string{"a1/messaging.publish", "a2/messaging.publish", "b1/messaging.publish"}},
			{"service", registry.Query{ServiceName: "alpha"}, []string{"a1/messaging.consume", "a1/messaging.publish", "a2/messaging.publish"}},
			{"service and capability", registry.Query{ServiceName: "beta", CapabilityID: "messaging.publish"}, []string{"b1/messaging.publish"}},
			{"provider", registry.Query{Provider: "jms", CapabilityID: "messaging.publish"}, []string{"a1/messaging.publish", "a2/messaging.publish"}},
			{"constraint", registry.Query{CapabilityID: "messaging.publish", Constraint: c}, []string{"a1/messaging.publish", "b1/messaging.publish"}},
			{"unknown capability", registry.Query{CapabilityID: "nothing.here"}, nil},
			{"unknown service", registry.Query{ServiceName: "gamma"}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if diff := cmp.Diff(tt.want, ids(s.Query(&tt.q))); diff != "" {
					t.Errorf("Query (-want +got):\n%s", diff)
				}
			})
		}
	})

	t.Run("watch wakes every watcher once per change", func(t *testing.T) {
		s := newStore(t, now)
		rev, ch := s.Watch()
		_, ch2 := s.Watch()
		select {
		case <-ch:
			t.Fatal("watch channel closed without a change")
		default:
		}
		s.Register(ctx, Record(t, "a", "svc", "x.y/p@1.0.0"))
		for _, c := range []<-chan struct{}{ch, ch2} {
			if !closedWithin(c) {
				t.Fatal("watch channel not closed by a register")
			}
		}
		if r2, _ := s.Watch(); r2 <= rev {
			t.Errorf("revision = %d after a change, want > %d", r2, rev)
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		s := newStore(t, now)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					id := fmt.Sprintf("w%d-%d", w, i)
					rec := Record(t, id, fmt.Sprintf("svc-%d", w), "x.y/p@1.0.0")
					if err := s.Register(ctx, rec); err != nil {
						t.Error(err)
						return
					}
					if _, err := s.Heartbeat(ctx, id, rec.Generation, apiv1.HealthOK, t0.Add(time.Hour)); err != nil {
						t.Error(err)
					}
					if i%2 == 0 {
						if _, err := s.Deregister(ctx, id, rec.Generation); err != nil {
							t.Error(err)
						}
					}
				}
			})
		}
		wg.Wait()
		if n, c := s.Counts(); n != 8*12 || c != 8*12 {
			t.Errorf("Counts() = %d, %d, want %d each", n, c, 8*12)
		}
		if got := len(s.Query(&registry.Query{CapabilityID: "x.y"})); got != 8*12 {
			t.Errorf("Query found %d, want %d", got, 8*12)
		}
	})

	t.Run("restore", func(t *testing.T) {
		if opts.NoRestore {
			t.Skip("the store keeps its own state")
		}
		s := newStore(t, now)
		s.Register(ctx, Record(t, "gone", "svc", "x.y/p@1.0.0"))
		a := Record(t, "a", "svc", "x.y/p@1.0.0")
		a.Generation = 41
		ep := registry.Epoch{ID: "restored-epoch", Start: t0, WarmUp: false}
		if err := s.Restore(ctx, ep, 17, 50, []*registry.Record{a}); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got := s.Epoch(); got != ep {
			t.Errorf("Epoch() = %+v, want %+v", got, ep)
		}
		if rev, _ := s.Watch(); rev != 17 {
			t.Errorf("revision = %d, want 17", rev)
		}
		if _, ok := s.Get("gone"); ok {
			t.Errorf("Restore kept a record that was not in the snapshot")
		}
		b := Record(t, "b", "svc", "x.y/p@1.0.0")
		s.Register(ctx, b)
		if b.Generation <= 50 {
			t.Errorf("generation after restore = %d, want > 50", b.Generation)
		}
		if _, err := s.Heartbeat(ctx, "a", 41, apiv1.HealthOK, t0.Add(time.Hour)); err != nil {
			t.Errorf("heartbeat of a restored generation: %v", err)
		}
	})
}
