package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
)

var _ registry.Store = (*Store)(nil)

type set map[*registry.Record]struct{}

// Store is the in-memory registry.Store.
type Store struct {
	mu         sync.RWMutex
	epoch      registry.Epoch
	records    map[string]*registry.Record
	byService  map[string]set
	byCap      map[string]set
	caps       int
	generation int64
	revision   int64
	changed    chan struct{}
}

// New returns an empty store whose epoch starts at now (time.Now when nil).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	t := now().UTC()
	return &Store{
		epoch:     registry.Epoch{ID: t.Format(time.RFC3339Nano), Start: t, Empty: true},
		records:   map[string]*registry.Record{},
		byService: map[string]set{},
		byCap:     map[string]set{},
		changed:   make(chan struct{}),
	}
}

// Name implements registry.Store.
func (s *Store) Name() string { return "memory" }

// Epoch implements registry.Store.
func (s *Store) Epoch() registry.Epoch {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.epoch
}

// bump advances the revision and wakes every watcher; s.mu must be held for writing.
func (s *Store) bump() {
	s.revision++
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Store) index(rec *registry.Record) {
	s.records[rec.InstanceID] = rec
	add(s.byService, rec.ServiceName, rec)
	for _, c := range rec.Capabilities {
		add(s.byCap, c.CapabilityID, rec)
	}
	s.caps += len(rec.Capabilities)
}

func (s *Store) unindex(rec *registry.Record) {
	delete(s.records, rec.InstanceID)
	remove(s.byService, rec.ServiceName, rec)
	for _, c := range rec.Capabilities {
		remove(s.byCap, c.CapabilityID, rec)
	}
	s.caps -= len(rec.Capabilities)
}

func add(m map[string]set, k string, rec *registry.Record) {
	b := m[k]
	if b == nil {
		b = set{}
		m[k] = b
	}
	b[rec] = struct{}{}
}

func remove(m map[string]set, k string, rec *registry.Record) {
	if b := m[k]; b != nil {
		delete(b, rec)
		if len(b) == 0 {
			delete(m, k)
		}
	}
}

// Register implements registry.Store.
func (s *Store) Register(_ context.Context, rec *registry.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[rec.InstanceID]; ok {
		s.unindex(old)
	}
	s.generation++
	rec.Generation = s.generation
	s.index(rec)
	s.bump()
	return nil
}

// current returns the record of id when generation matches (or is 0); s.mu must be held.
func (s *Store) current(id string, generation int64) (*registry.Record, error) {
	rec, ok := s.records[id]
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
	}
	if generation != 0 && rec.Generation != generation {
		return nil, fmt.Errorf("instance %q: generation %d is not the current generation %d: %w",
			id, generation, rec.Generation, registry.ErrGenerationMismatch)
	}
	return rec, nil
}

// Heartbeat implements registry.Store. It takes only the read lock unless the health changed.
func (s *Store) Heartbeat(_ context.Context, id string, generation int64, health string, expires time.Time) (*registry.Record, error) {
	s.mu.RLock()
	rec, err := s.current(id, generation)
	if err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	rec.SetLeaseExpiresAt(expires)
	changed := rec.SetHealth(health)
	s.mu.RUnlock()
	if changed {
		s.mu.Lock()
		if s.records[id] == rec { // still current: the change is visible
			s.bump()
		}
		s.mu.Unlock()
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
	s.unindex(rec)
	s.bump()
	return rec, nil
}

// Expire implements registry.Store. The scan runs under the read lock; the write lock is
// taken only when something expired.
func (s *Store) Expire(_ context.Context, now time.Time) ([]*registry.Record, error) {
	var expired []*registry.Record
	s.mu.RLock()
	for _, rec := range s.records {
		if rec.Expired(now) {
			expired = append(expired, rec)
		}
	}
	s.mu.RUnlock()
	if len(expired) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := expired[:0]
	for _, rec := range expired {
		// A heartbeat or re-registration may have come in between the two locks.
		if s.records[rec.InstanceID] == rec && rec.Expired(now) {
			s.unindex(rec)
			gone = append(gone, rec)
		}
	}
	if len(gone) > 0 {
		s.bump()
	}
	return gone, nil
}

// Restore implements registry.Store.
func (s *Store) Restore(_ context.Context, epoch registry.Epoch, revision, generation int64, recs []*registry.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = make(map[string]*registry.Record, len(recs))
	s.byService, s.byCap, s.caps = map[string]set{}, map[string]set{}, 0
	for _, rec := range recs {
		s.index(rec)
	}
	s.epoch = epoch
	s.generation = max(s.generation, generation)
	s.revision = revision - 1
	s.bump()
	return nil
}

// Get implements registry.Store.
func (s *Store) Get(id string) (*registry.Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rec, ok := s.records[id]
	return rec, ok
}

// Records implements registry.Store.
func (s *Store) Records() []*registry.Record {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*registry.Record, 0, len(s.records))
	for _, rec := range s.records {
		out = append(out, rec)
	}
	return out
}

// Query implements registry.Store: it scans the smaller of the service and capability
// indexes that the query names, or every record when it names neither.
func (s *Store) Query(q *registry.Query) []registry.Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var cands set
	switch {
	case q.ServiceName != "" && q.CapabilityID != "":
		cands = s.byService[q.ServiceName]
		if c := s.byCap[q.CapabilityID]; len(c) < len(cands) {
			cands = c
		}
	case q.ServiceName != "":
		cands = s.byService[q.ServiceName]
	case q.CapabilityID != "":
		cands = s.byCap[q.CapabilityID]
	default:
		out := make([]registry.Entry, 0, s.caps)
		for _, rec := range s.records {
			out = appendMatches(out, q, rec)
		}
		return out
	}
	out := make([]registry.Entry, 0, len(cands))
	for rec := range cands {
		out = appendMatches(out, q, rec)
	}
	return out
}

func appendMatches(out []registry.Entry, q *registry.Query, rec *registry.Record) []registry.Entry {
	for i := range rec.Capabilities {
		if q.Matches(rec, &rec.Capabilities[i]) {
			out = append(out, registry.Entry{Record: rec, Cap: i})
		}
	}
	return out
}

// Counts implements registry.Store.
func (s *Store) Counts() (instances, capabilities int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.records), s.caps
}

// Generation implements registry.Store.
func (s *Store) Generation() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.generation
}

// Watch implements registry.Store.
func (s *Store) Watch() (int64, <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.revision, s.changed
}
