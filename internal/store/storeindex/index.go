package storeindex

import (
	"slices"
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
	routed    set // the records with a manifest or a public path: the inputs of gateways' routes
	caps      int
	revision  int64
	changed   chan struct{}

	// While held (Hold, until the matching Release), changes apply at once but the revision
	// readers see moves only at the release: heldRev is where it then goes (0: one past the
	// current), held whether anything changed meanwhile.
	holds   int
	heldRev int64
	held    bool

	// Changes put ahead of the revision (PutAhead): the revisions they were written at,
	// above reached, the revision up to which the store has seen every write (Reached).
	ahead   []int64
	reached int64

	// dirty is what changed since the revision readers see last moved, told to onPublish
	// when it moves (registry.ChangePublisher).
	dirty     registry.Changes
	onPublish func(rev int64, c registry.Changes)
}

// OnPublish implements registry.ChangePublisher: fn hears every move of the revision readers
// see, with what changed since the previous one, under the index's write lock.
func (ix *Index) OnPublish(fn func(rev int64, c registry.Changes)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.onPublish = fn
}

// maxDirtyNames bounds the names one move of the revision tells: past it, the move says that
// everything changed. As the monitor's own bound (health's maxTouched), it is well above
// what one ramp clock moves during an evacuation (some 2,000 instances per clock, about twenty
// clocks a second, at 60,000 instances): with 4,096, two clocks gathered in one move woke every long
// poll of the fleet, and sent every delta watch a whole answer.
const maxDirtyNames = 1 << 16

// noteLocked adds rec's service and capabilities to what the next move of the revision tells.
func (ix *Index) noteLocked(rec *registry.Record, removed bool) { ix.noteOnceLocked(rec, removed, nil) }

// dirtyName is a service's name, or a capability's, as noteOnceLocked tells it once.
type dirtyName struct {
	capability bool
	name       string
}

// noteOnceLocked is noteLocked that tells each service and capability once in the names seen
// holds (nil: no such set), and adds them to it.
func (ix *Index) noteOnceLocked(rec *registry.Record, removed bool, seen map[dirtyName]struct{}) {
	d := &ix.dirty
	if ix.onPublish == nil || d.All {
		return
	}
	if len(d.Services)+len(d.Capabilities)+len(d.Instances) >= maxDirtyNames {
		ix.noteAllLocked()
		return
	}
	once := func(n dirtyName) bool {
		if seen == nil {
			return true
		}
		if _, ok := seen[n]; ok {
			return false
		}
		seen[n] = struct{}{}
		return true
	}
	if once(dirtyName{name: rec.ServiceName}) {
		d.Services = append(d.Services, rec.ServiceName)
	}
	d.Instances = append(d.Instances, rec.InstanceID)
	for _, c := range rec.Capabilities {
		if once(dirtyName{capability: true, name: c.CapabilityID}) {
			d.Capabilities = append(d.Capabilities, c.CapabilityID)
		}
	}
	d.Routed = d.Routed || rec.Routed()
	d.Removed = d.Removed || removed
}

// noteAllLocked says that the next move of the revision may change every answer.
func (ix *Index) noteAllLocked() {
	ix.dirty.Services, ix.dirty.Capabilities, ix.dirty.Instances = ix.dirty.Services[:0], ix.dirty.Capabilities[:0], ix.dirty.Instances[:0]
	ix.dirty.All = true
}

// NewIndex returns an empty index at revision 0.
func NewIndex() *Index {
	return &Index{records: map[string]*registry.Record{}, byService: map[string]set{}, byCap: map[string]set{}, probed: set{}, routed: set{},
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
	if ix.onPublish != nil {
		ix.onPublish(ix.revision, ix.dirty)
		clear(ix.dirty.Services) // the strings they hold
		clear(ix.dirty.Capabilities)
		clear(ix.dirty.Instances)
		ix.dirty = registry.Changes{Services: ix.dirty.Services[:0], Capabilities: ix.dirty.Capabilities[:0], Instances: ix.dirty.Instances[:0]}
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
	if rec.Routed() {
		ix.routed[rec] = struct{}{}
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
	delete(ix.routed, rec)
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
func (ix *Index) Put(rec *registry.Record, rev int64) { ix.put(rec, rev, (*Index).bumpLocked) }

// PutNewer is Put unless the index already holds an incarnation of rec's instance as new as
// rec or newer (by Generation); it reports whether it stored rec. A store whose watch brings
// back its own writes puts the copy it decoded with PutNewer: the look and the put are one
// step, so the copy never replaces the record the store itself put meanwhile.
func (ix *Index) PutNewer(rec *registry.Record, rev int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	cur, ok := ix.records[rec.InstanceID]
	if ok && cur.Generation >= rec.Generation {
		return false
	}
	if ok {
		ix.noteLocked(cur, false)
	}
	ix.noteLocked(rec, false)
	ix.indexLocked(rec)
	ix.bumpLocked(rev)
	return true
}

// Remove deletes the record of id, if it is the one given (nil: any), and moves the
// revision to rev (0: one more). It returns the record removed.
func (ix *Index) Remove(id string, only *registry.Record, rev int64) *registry.Record {
	return ix.remove(id, only, rev, (*Index).bumpLocked)
}

// PutAhead stores rec (replacing the record of its instance), written at rev, without moving
// the revision yet: the change is read at once, and the revision moves to rev once Reached
// says every write up to rev is in. A store whose view follows a watch (etcd) puts its own
// writes so: one may be ahead of another replica's earlier write the watch has not brought
// in yet, and a revision readers see must hold every write up to it (answers are cached, and
// long polls woken, by revision).
func (ix *Index) PutAhead(rec *registry.Record, rev int64) { ix.put(rec, rev, (*Index).aheadLocked) }

// RemoveAhead is Remove at rev, ahead of the revision as PutAhead is.
func (ix *Index) RemoveAhead(id string, only *registry.Record, rev int64) *registry.Record {
	return ix.remove(id, only, rev, (*Index).aheadLocked)
}

// put stores rec and then has move note the change at rev (bumpLocked: the revision moves
// now; aheadLocked: once reached).
func (ix *Index) put(rec *registry.Record, rev int64, move func(*Index, int64)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old, ok := ix.records[rec.InstanceID]; ok {
		ix.noteLocked(old, false)
	}
	ix.noteLocked(rec, false)
	ix.indexLocked(rec)
	move(ix, rev)
}

// remove deletes the record of id, if it is only (nil: any), and has move note the change at
// rev, as put does; it returns the record removed.
func (ix *Index) remove(id string, only *registry.Record, rev int64, move func(*Index, int64)) *registry.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	rec, ok := ix.records[id]
	if !ok || (only != nil && rec != only) {
		return nil
	}
	ix.noteLocked(rec, true)
	ix.unindexLocked(rec)
	move(ix, rev)
	return rec
}

// aheadLocked notes a change at rev put ahead of the revision. At a revision already reached
// there is nothing to note: the store saw that write first, and the revision moved with it.
func (ix *Index) aheadLocked(rev int64) {
	if rev > ix.reached {
		ix.ahead = append(ix.ahead, rev)
	}
}

// Reached says the store has seen every write up to rev: the revision moves past the
// changes put ahead at revisions up to it (at the release, while held).
func (ix *Index) Reached(rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if shown := ix.reachedLocked(rev); shown > 0 {
		ix.bumpLocked(shown)
	}
}

// reachedLocked drops the changes put ahead at revisions up to rev and returns the highest
// of them (0: none).
func (ix *Index) reachedLocked(rev int64) (shown int64) {
	ix.reached = max(ix.reached, rev)
	ix.ahead = slices.DeleteFunc(ix.ahead, func(r int64) bool {
		if r <= rev {
			shown = max(shown, r)
			return true
		}
		return false
	})
	return shown
}

// Reset replaces every record and sets the revision.
func (ix *Index) Reset(recs []*registry.Record, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.records = make(map[string]*registry.Record, len(recs))
	ix.byService, ix.byCap, ix.probed, ix.routed, ix.caps = map[string]set{}, map[string]set{}, set{}, set{}, 0
	for _, rec := range recs {
		ix.indexLocked(rec)
	}
	ix.revision = rev - 1
	ix.noteAllLocked()
	ix.publishLocked(0)
	ix.reachedLocked(rev) // the records given hold the changes put ahead up to rev, counted in rev
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

// Touch moves the revision without changing a record, for a change that may concern every
// answer (a ramp clock that weighs the whole fleet again).
func (ix *Index) Touch(rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.noteAllLocked()
	ix.bumpLocked(rev)
}

// TouchRecord moves the revision for a visible change of rec that is not in the record's
// indexes (its self-reported health, its verdict), so that it concerns the answers of rec's
// service and capabilities alone.
func (ix *Index) TouchRecord(rec *registry.Record, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.noteLocked(rec, false)
	ix.bumpLocked(rev)
}

// TouchID is TouchRecord for the record the index holds for id; when it holds none the
// revision moves with nothing to tell (no answer holds the instance).
func (ix *Index) TouchID(id string, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if rec, ok := ix.records[id]; ok {
		ix.noteLocked(rec, false)
	}
	ix.bumpLocked(rev)
}

// TouchIDs is TouchID for many instances at one revision (those a ramp clock moved): each of
// their services and capabilities is told once, however many of its instances moved.
func (ix *Index) TouchIDs(ids []string, rev int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var seen map[dirtyName]struct{}
	if len(ids) > 1 {
		seen = map[dirtyName]struct{}{}
	}
	for _, id := range ids {
		if rec, ok := ix.records[id]; ok {
			ix.noteOnceLocked(rec, false, seen)
		}
	}
	ix.bumpLocked(rev)
}

// Get returns the current record of an instance.
func (ix *Index) Get(id string) (*registry.Record, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	rec, ok := ix.records[id]
	return rec, ok
}

// Holds reports whether rec is the record the index holds for its instance: not replaced by
// a later incarnation, not removed.
func (ix *Index) Holds(rec *registry.Record) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.records[rec.InstanceID] == rec
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
func (ix *Index) ProbedRecords() []*registry.Record { return ix.members(ix.probed) }

// RoutedRecords returns the records with a manifest or a public path, in no order: what the
// routes answer is built from, without walking the records that publish neither.
func (ix *Index) RoutedRecords() []*registry.Record { return ix.members(ix.routed) }

// members returns the records of one of the index's sets.
func (ix *Index) members(s set) []*registry.Record {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make([]*registry.Record, 0, len(s))
	for rec := range s {
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

// Newest returns the revision of the newest change the index holds: the revision, or a
// change put ahead of it.
func (ix *Index) Newest() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	newest := ix.revision
	for _, r := range ix.ahead {
		newest = max(newest, r)
	}
	return newest
}

// Watch returns the current revision and a channel closed at the next change.
func (ix *Index) Watch() (int64, <-chan struct{}) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.revision, ix.changed
}
