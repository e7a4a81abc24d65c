package etcdstore

import (
	"slices"
	"sync"
)

// A replica reads its own writes at once (a registrant's first heartbeat may come back
// through it before the watch does), but the revision it answers at follows its watch: a
// revision must hold every write etcd made up to it, and a registration of this replica at
// revision R may be ahead of another replica's write at R-1 that the watch has not brought in
// yet. Answers are cached, and long polls woken, by revision: an answer at R without that
// write would stand until some later change. So the store puts its own writes in its view
// ahead of the revision (storeindex.Index.PutAhead) and notes their revisions here; once the
// watch has folded in every write up to one of them, the revision moves to it.

// ahead holds the revisions of this replica's own writes that its view holds before its
// revision shows them.
type ahead struct {
	mu      sync.Mutex
	applied int64   // the watch has folded in every write up to this revision
	revs    []int64 // this replica's writes above applied
	last    int64   // the highest revision this replica wrote at
}

// wrote notes a write of this replica at rev, before the view takes it: were the watch to
// fold it in first, the view would take it from the watch, and the note is dropped.
func (a *ahead) wrote(rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = max(a.last, rev)
	if rev > a.applied {
		a.revs = append(a.revs, rev)
	}
}

// reached notes that the watch has folded in every write up to rev, and returns the highest
// revision of this replica's writes up to it (0: none), which the revision must now show.
func (a *ahead) reached(rev int64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = max(a.applied, rev)
	var shown int64
	a.revs = slices.DeleteFunc(a.revs, func(r int64) bool {
		if r <= rev {
			shown = max(shown, r)
			return true
		}
		return false
	})
	return shown
}

// lastWrite returns the highest revision this replica wrote at (0: none yet).
func (a *ahead) lastWrite() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}
