package storeindex

import (
	"sync"

	"github.com/meshflows/meshflows/internal/registry"
)

type set map[*registry.Record]struct{}

// Index is the in-memory view of the registered records with the indexes queries use, a
// revision and the channel watchers wait on. The memory store is an Index plus a generation
// counter; the etcd store keeps one current from its watch. It is safe for concurrent use.
type Index struct {
	mu        sync.RWMutex
	records   map[string]*registry.Record
	byService map[string]set
	byCap     map[string]set
	probed    set // the records whose manifest declares a health probe
	caps      int
	revision  int64
	changed   chan struct{}

	// While held (Hold, until the matching Release), changes apply at once but the revision
	// readers see moves only at the release: heldRev is where it then goes (0: one past the
	// current), held whether anything changed meanwhile.
	holds   int
	heldRev int64
	held    bool
}

// NewIndex returns an empty index at revision 0.
func NewIndex() *Index {
	return &Index{records: map[string]*registry.Record{}, byService: map[string]set{}, byCap: map[string]set{}, probed: set{},
		changed: make(chan struct{})}
}

// bumpLocked moves the revision to rev (or one past the current one when rev is 0) and wakes
// every watcher — at the release, while the index is held; ix.mu must be held for writing.
func (ix *Index) bumpLocked(rev int64) {
	if ix.holds > 0 {
		ix.held = true
		ix.heldRev = max(ix.heldRev, rev)
		return
	}
	ix.publishLocked(rev)
}

// publishLocked moves the revision readers see and wakes every watcher.
func (ix *Index) publishLocked(rev int64) {
	if rev > 0 {
		ix.revision = max(rev, ix.revision)
	} else {
		ix.revision++
	}
	close(ix.changed)
	ix.changed = make(chan struct{})
}

func (ix *Index) indexLocked(rec *registry.Record) {
	if old, ok := ix.records[rec.InstanceID]; ok {
		ix.unindexLocked(old)
	}
	ix.records[rec.InstanceID] = rec
	add(ix.byService, rec.ServiceName, rec)
	for _, c := range rec.Capabilities {
		add(ix.byCap, c.CapabilityID, rec)
	}
	if rec.Probed() {
		ix.probed[rec] = struct{}{}
	}
	ix.caps += len(rec.Capabilities)
}

func (ix *Index) unindexLocked(rec *registry.Record) {
	delete(ix.records, rec.InstanceID)
	remove(ix.byService, rec.ServiceName, rec)
	for _, c := range rec.Capabilities {
		remove(ix.byCap, c.CapabilityID, rec)
	}
	delete(ix.probed, rec)
	ix.caps -= len(rec.Capabilities)
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

// Put stores rec (replacing the record of its instance) and moves the revision to rev (0:
// one more).
func (ix *Index) Put(rec *registry.Record, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.indexLocked(rec)
	ix.bumpLocked(rev)
}

// PutNewer is Put unless the index already holds an incarnation of rec's instance as new as
// rec or newer (by Generation); it reports whether it stored rec. A store whose watch brings
// back its own writes puts the copy it decoded with PutNewer: the look and the put are one
// step, so the copy never replaces the record the store itself put meanwhile.
func (ix *Index) PutNewer(rec *registry.Record, rev int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if cur, ok := ix.records[rec.InstanceID]; ok && cur.Generation >= rec.Generation {
		return false
	}
	ix.indexLocked(rec)
	ix.bumpLocked(rev)
	return true
}

// Remove deletes the record of id, if it is the one given (nil: any), and moves the
// revision to rev (0: one more). It returns the record removed.
func (ix *Index) Remove(id string, only *registry.Record, rev int64) *registry.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	rec := ix.removeLocked(id, only)
	if rec != nil {
		ix.bumpLocked(rev)
	}
	return rec
}

func (ix *Index) removeLocked(id string, only *registry.Record) *registry.Record {
	rec, ok := ix.records[id]
	if !ok || (only != nil && rec != only) {
		return nil
	}
	ix.unindexLocked(rec)
	return rec
}

// PutAhead stores rec (replacing the record of its instance) without moving the revision:
// the change is read at once, and counted in the revision by a later Touch. A store whose
// revision follows a watch (etcd) puts its own writes so: their revision may be above writes
// of other replicas that the watch has not brought in yet, and a revision readers see must
// hold every write up to it.
func (ix *Index) PutAhead(rec *registry.Record) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.indexLocked(rec)
}

// RemoveAhead is Remove without moving the revision (see PutAhead).
func (ix *Index) RemoveAhead(id string, only *registry.Record) *registry.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.removeLocked(id, only)
}

// Reset replaces every record and sets the revision.
func (ix *Index) Reset(recs []*registry.Record, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.records = make(map[string]*registry.Record, len(recs))
	ix.byService, ix.byCap, ix.probed, ix.caps = map[string]set{}, map[string]set{}, set{}, 0
	for _, rec := range recs {
		ix.indexLocked(rec)
	}
	ix.revision = rev - 1
	ix.publishLocked(0)
}

// Hold defers the revision moves of the changes that follow until the matching Release, so
// that several changes at one revision (etcd writes a registration's record and health, or a
// batch of verdicts, in one transaction) become visible under that revision together: a
// reader in between sees the previous revision, and its answer at the previous revision is
// replaced once the revision moves, instead of standing for the new revision with only some
// of its changes. Holds nest; the changes themselves apply at once.
func (ix *Index) Hold() {
	ix.mu.Lock()
	ix.holds++
	ix.mu.Unlock()
}

// Release ends a Hold; the last one moves the revision past the held changes and wakes the
// watchers.
func (ix *Index) Release() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.holds--
	if ix.holds == 0 && ix.held {
		rev := ix.heldRev
		ix.held, ix.heldRev = false, 0
		ix.publishLocked(rev)
	}
}

// Touch moves the revision without changing a record (a visible change of health).
func (ix *Index) Touch(rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.bumpLocked(rev)
}

// Get returns the current record of an instance.
func (ix *Index) Get(id string) (*registry.Record, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	rec, ok := ix.records[id]
	return rec, ok
}

// Records returns every record, in no particular order.
func (ix *Index) Records() []*registry.Record {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]*registry.Record, 0, len(ix.records))
	for _, rec := range ix.records {
		out = append(out, rec)
	}
	return out
}

// ProbedRecords returns the records whose manifest declares a health probe, in no order:
// what the prober walks, without walking the records that declare none.
func (ix *Index) ProbedRecords() []*registry.Record {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]*registry.Record, 0, len(ix.probed))
	for rec := range ix.probed {
		out = append(out, rec)
	}
	return out
}

// Query returns the entries that match q: it scans the smaller of the service and
// capability indexes that the query names, or every record when it names neither.
func (ix *Index) Query(q *registry.Query) []registry.Entry {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var cands set
	switch {
	case q.ServiceName != "" && q.CapabilityID != "":
		cands = ix.byService[q.ServiceName]
		if c := ix.byCap[q.CapabilityID]; len(c) < len(cands) {
			cands = c
		}
	case q.ServiceName != "":
		cands = ix.byService[q.ServiceName]
	case q.CapabilityID != "":
		cands = ix.byCap[q.CapabilityID]
	default:
		out := make([]registry.Entry, 0, ix.caps)
		for _, rec := range ix.records {
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

// Counts returns how many instances and capabilities are indexed.
func (ix *Index) Counts() (instances, capabilities int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.records), ix.caps
}

// Watch returns the current revision and a channel closed at the next change.
func (ix *Index) Watch() (int64, <-chan struct{}) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.revision, ix.changed
}
