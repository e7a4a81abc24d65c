package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	rec.SetLeaseExpiresAt(expires)
	changed := rec.SetHealth(health)
	if rec.Confirm() { // a restored instance heard from: discovery stops marking it
		changed = true
	}
	if changed {
		if cur, ok := s.Get(id); ok && cur == rec { // still current: the change is visible
			s.Touch(0)
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

// Expire implements registry.Store: the scan runs under the index's read lock; a record
// is removed only if it is still the current one and still expired.
func (s *Store) Expire(_ context.Context, now time.Time) ([]*registry.Record, error) {
	var gone []*registry.Record
	for _, rec := range s.Records() {
		if rec.Expired(now) {
			gone = append(gone, rec)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := gone[:0]
	for _, rec := range gone {
		if rec.Expired(now) && s.Remove(rec.InstanceID, rec, 0) != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Restore implements registry.Store.
func (s *Store) Restore(_ context.Context, epoch registry.Epoch, revision, generation int64, recs []*registry.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Reset(recs, revision)
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
