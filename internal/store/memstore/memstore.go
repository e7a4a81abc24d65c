package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshflows/meshflows/internal/deadline"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/storeindex"
)

var _ registry.Store = (*Store)(nil)

// Store is the in-memory registry.Store: a storeindex.Index, a generation counter and an epoch.
type Store struct {
	*storeindex.Index
	mu         sync.Mutex // serialises writes: generation assignment and index update together
	epoch      registry.Epoch
	generation int64
	// leases holds the records by the earliest instant their lease can end, so that Expire
	// looks at those alone instead of every record; a record renewed since goes back in at
	// its new end, and one removed or replaced is dropped when it comes out. Guarded by qmu
	// (taken after mu, never before).
	qmu    sync.Mutex
	leases deadline.Queue[*registry.Record]
}

// New returns an empty store whose epoch starts at now (time.Now when nil).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	t := now().UTC()
	return &Store{Index: storeindex.NewIndex(), epoch: registry.Epoch{ID: t.Format(time.RFC3339Nano), Start: t, WarmUp: true}}
}

// Name implements registry.Store.
func (s *Store) Name() string { return "memory" }

// Epoch implements registry.Store.
func (s *Store) Epoch() registry.Epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Register implements registry.Store.
func (s *Store) Register(_ context.Context, rec *registry.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.generation++
	rec.Generation = s.generation
	s.Put(rec, 0)
	s.queue(rec, rec.LeaseExpiresAt())
	return nil
}

// current returns the record of id when generation matches (or is 0).
func (s *Store) current(id string, generation int64) (*registry.Record, error) {
	rec, ok := s.Get(id)
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
	}
	if generation != 0 && rec.Generation != generation {
		return nil, fmt.Errorf("instance %q: generation %d is not the current generation %d: %w",
			id, generation, rec.Generation, registry.ErrGenerationMismatch)
	}
	return rec, nil
}

// Heartbeat implements registry.Store. It takes only the index's read lock unless the
// health changed.
func (s *Store) Heartbeat(_ context.Context, id string, generation int64, health string, expires time.Time) (*registry.Record, error) {
	rec, err := s.current(id, generation)
	if err != nil {
		return nil, err
	}
	if expires.Before(rec.LeaseExpiresAt()) { // moved earlier: its queue entry would be late
		s.queue(rec, expires)
	}
	rec.SetLeaseExpiresAt(expires)
	changed := rec.SetHealth(health)
	if rec.Confirm() { // a restored instance heard from: discovery stops marking it
		changed = true
	}
	if changed {
		if s.Holds(rec) { // still current: the change is visible
			s.TouchRecord(rec, 0)
		}
	}
	return rec, nil
}

// Deregister implements registry.Store.
func (s *Store) Deregister(_ context.Context, id string, generation int64) (*registry.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.current(id, generation)
	if err != nil {
		return nil, err
	}
	s.Remove(id, rec, 0)
	return rec, nil
}

// Expire implements registry.Store. Only the records whose queued lease end has come are
// looked at; a record is removed only if it is still the current one and still expired.
func (s *Store) Expire(_ context.Context, now time.Time) ([]*registry.Record, error) {
	var gone []*registry.Record
	s.qmu.Lock()
	for s.leases.Due(now.UnixNano()) {
		_, rec := s.leases.Pop()
		if !s.Holds(rec) {
			continue // removed or replaced since it was queued
		}
		if !rec.Expired(now) {
			s.leases.Push(rec.LeaseExpiresAt().UnixNano(), rec) // renewed: back in at its new end
			continue
		}
		gone = append(gone, rec)
	}
	s.qmu.Unlock()
	if len(gone) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := gone[:0]
	for _, rec := range gone {
		if rec.Expired(now) && s.Remove(rec.InstanceID, rec, 0) != nil {
			out = append(out, rec)
			continue
		}
		if s.Holds(rec) { // renewed in between
			s.queue(rec, rec.LeaseExpiresAt())
		}
	}
	return out, nil
}

// Expiring implements the registry's optional lister of the records whose lease ended at
// or before now (without removing them): it visits only the queue entries due by now.
func (s *Store) Expiring(now time.Time) []*registry.Record {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	var out []*registry.Record
	seen := map[*registry.Record]bool{} // a record moved earlier has two entries
	s.leases.Walk(now.UnixNano(), func(_ int64, rec *registry.Record) {
		if s.Holds(rec) && rec.Expired(now) && !seen[rec] {
			seen[rec] = true
			out = append(out, rec)
		}
	})
	return out
}

// queue puts rec in the lease queue at at, and removes a few entries of records replaced
// or removed since they were queued, once the queue holds more than the records held
// (deadline's Tidy): each holds its record, and through it the instance's eligibility view,
// until its lease end.
func (s *Store) queue(rec *registry.Record, at time.Time) {
	s.qmu.Lock()
	s.leases.Push(at.UnixNano(), rec)
	live, _ := s.Counts()
	s.leases.Tidy(live, s.leaseHolds)
	s.qmu.Unlock()
}

// leaseHolds reports whether a lease queue entry's record is still the one held: one that is
// not never will be again (a record replaced or removed does not come back).
func (s *Store) leaseHolds(_ int64, rec *registry.Record) bool { return s.Holds(rec) }

// Restore implements registry.Store.
func (s *Store) Restore(_ context.Context, epoch registry.Epoch, revision, generation int64, recs []*registry.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Reset(recs, revision)
	s.qmu.Lock()
	s.leases.Reset()
	for _, rec := range recs {
		s.leases.Push(rec.LeaseExpiresAt().UnixNano(), rec)
	}
	s.qmu.Unlock()
	s.epoch = epoch
	s.generation = max(s.generation, generation)
	return nil
}

// Generation implements registry.Store.
func (s *Store) Generation() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}
