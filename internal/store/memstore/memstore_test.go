package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) registry.Store { return memstore.New(now) }, storetest.Options{})
}

func TestNewStoreStartsAnEmptyEpoch(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := memstore.New(func() time.Time { return at })
	ep := s.Epoch()
	if !ep.WarmUp || !ep.Start.Equal(at) || ep.ID != "2026-01-02T03:04:05.000000006Z" {
		t.Errorf("Epoch() = %+v, want an empty epoch starting at %v", ep, at)
	}
	if s2 := memstore.New(func() time.Time { return at.Add(time.Nanosecond) }); s2.Epoch().ID == ep.ID {
		t.Errorf("two stores started apart share the epoch %q", ep.ID)
	}
}

// TestExpireMatchesAWalk registers, renews, replaces, deregisters and restores records at
// random while time moves, and checks that each Expire removes exactly the records a walk
// of the whole store finds expired (the store looks only at its lease queue).
func TestExpireMatchesAWalk(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memstore.New(func() time.Time { return at })
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%02d", i)
	}
	lease := func() time.Time { return at.Add(time.Duration(5+rng.IntN(60)) * time.Second) }
	expiredSeen := 0
	for step := range 3000 {
		at = at.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		id := ids[rng.IntN(len(ids))]
		switch r := rng.IntN(100); {
		case r < 20:
			rec := storetest.Record(t, id, "svc", "x.y/p@1.0.0")
			rec.SetLeaseExpiresAt(lease())
			if err := s.Register(ctx, rec); err != nil {
				t.Fatal(err)
			}
		case r < 80:
			if cur, ok := s.Get(id); ok && !cur.Expired(at) {
				end := lease()
				if rng.IntN(10) == 0 {
					end = at.Add(time.Second) // a lease moved earlier
				}
				if _, err := s.Heartbeat(ctx, id, cur.Generation, apiv1.HealthOK, end); err != nil {
					t.Fatal(err)
				}
			}
		case r < 85:
			s.Deregister(ctx, id, 0)
		case r < 86:
			recs := s.Records()
			if err := s.Restore(ctx, s.Epoch(), 1, s.Generation(), recs); err != nil {
				t.Fatal(err)
			}
		}
		var want []string
		for _, rec := range s.Records() {
			if rec.Expired(at) {
				want = append(want, rec.InstanceID)
			}
		}
		var listed []string
		for _, rec := range s.Expiring(at) {
			listed = append(listed, rec.InstanceID)
		}
		slices.Sort(want)
		slices.Sort(listed)
		if !slices.Equal(listed, want) {
			t.Fatalf("step %d: Expiring lists %v, a walk finds %v expired", step, listed, want)
		}
		gone, err := s.Expire(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, rec := range gone {
			got = append(got, rec.InstanceID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: Expire removed %v, a walk finds %v expired", step, got, want)
		}
		expiredSeen += len(got)
	}
	if expiredSeen == 0 {
		t.Fatal("nothing ever expired: the walk tests nothing")
	}
	t.Logf("%d expiries", expiredSeen)
}

// TestLeaseQueueFollowsTheFleet re-registers the same instances over and over, and
// deregisters and registers them again, within one lease: the lease queue, where a replaced
// or removed record used to wait for its lease end, stays near the fleet's size, and the
// leases of the records held still end.
func TestLeaseQueueFollowsTheFleet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deregister bool // deregister each incarnation before the next
	}{
		{"re-registered", false},
		{"deregistered and registered again", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(5, 6))
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			s := memstore.New(func() time.Time { return at })
			const fleet, rounds = 100, 200
			most := 0
			for round := range rounds {
				for i := range fleet {
					id := fmt.Sprintf("i%03d", i)
					if tc.deregister && round > 0 {
						if _, err := s.Deregister(ctx, id, 0); err != nil {
							t.Fatal(err)
						}
					}
					rec := storetest.Record(t, id, "svc", "x.y/p@1.0.0")
					// lease ends in no order, so that the queue's oldest entries are not
					// all stale
					rec.SetLeaseExpiresAt(at.Add(time.Duration(300+rng.IntN(600)) * time.Second))
					if err := s.Register(ctx, rec); err != nil {
						t.Fatal(err)
					}
					most = max(most, memstore.QueuedLeases(s))
					// every record held is still queued: listed once its lease has ended
					// (checked every seventh registration: a lost entry stays lost until its
					// instance registers again, a hundred registrations later)
					if step := round*fleet + i; step%7 == 0 {
						if n, held := len(s.Expiring(at.Add(16*time.Minute))), min(fleet, step+1); n != held {
							t.Fatalf("registration %d: %d records listed as expiring after every lease ended, want the %d held", step, n, held)
						}
					}
				}
				at = at.Add(time.Second)
			}
			// 1,024 entries over the fleet before the queue is tidied at all, then a few
			// entries looked at per push keep it near that
			if bound := 2*fleet + 1024; most > bound {
				t.Errorf("the lease queue held up to %d entries for %d instances registered %d times each (bound %d)", most, fleet, rounds, bound)
			}
			at = at.Add(16 * time.Minute)
			gone, err := s.Expire(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			if len(gone) != fleet {
				t.Fatalf("Expire removed %d records once every lease ended, want the %d held", len(gone), fleet)
			}
			if n, _ := s.Counts(); n != 0 {
				t.Fatalf("%d records left after every lease ended", n)
			}
		})
	}
}
