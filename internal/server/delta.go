package server

import (
	"net/http"
	"slices"
	"strconv"
	"sync"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/registry"
)

// Delta watches (GET /v1/discovery/capabilities?index=N&delta=true): for each query a delta
// watcher asked, the registry keeps the entries of the answer it last built and the changes
// between its last builds, so that a watcher at revision N is sent what changed since its
// answer at N — a few entries after a change of one instance, where the whole answer of a
// service of 100 instances is some 42 KB — and the whole answer (reset) only when it cannot
// tell the changes since N.
//
// A change is judged per entry by what the answer says of it, lease_expires_at aside: the
// incarnation (a record is one incarnation: a new one is a removal of the old and additions),
// its eligibility, weight, health, panic and restored. Heartbeats that change nothing else
// move no revision, and a delta does not carry their leases.

// Bounds of the delta history: the queries kept (past it, the least recently asked go), the
// changes kept per query (a watcher further back is reset).
const (
	maxDeltaQueries = 4096
	maxDeltaSteps   = 64
)

// entryKey names one entry of an answer: an instance's capability (its index in the record:
// one incarnation's capabilities never change).
type entryKey struct {
	instance string
	cap      int
}

// entryState is what a delta compares of an entry: the incarnation (its record) and its
// verdict, self-report and flags.
type entryState struct {
	rec         *registry.Record
	eligibility string
	weight      int
	panic       bool
	health      string
	restored    bool
}

func stateOf(e registry.Entry) entryState {
	return entryState{rec: e.Record, eligibility: e.Eligibility, weight: e.Weight, panic: e.Panic, health: e.Record.Health(), restored: e.Record.Restored()}
}

// upsert is one entry a step added or changed; updated says the step's base held it.
type upsert struct {
	key     entryKey
	entry   registry.Entry
	updated bool
}

// step is the change from the answer at from to the answer at to: the instances whose
// entries left (removals first), then the entries put.
type step struct {
	from, to int64
	// fromGeneration is answerSet.generation of the answer at from
	fromGeneration int64
	removed        []apiv1.Removal
	upserts        []upsert
}

// answerSet is the entries of one build, by key, and the instances' records.
type answerSet struct {
	state     registry.State
	entries   map[entryKey]entryState
	instances map[string]*registry.Record
	order     []registry.Entry // in the answer's order
	removed   []apiv1.Removal  // the warm-up's removals the answer lists
	// generation is the highest generation the registry had assigned when the answer was
	// read: the warm-up's removals above it are newer than the answer.
	generation int64
}

// queryHistory is the delta history of one query.
type queryHistory struct {
	mu    sync.Mutex
	cur   *answerSet
	steps []step // oldest first; steps[len-1].to == cur.state.Revision
	used  uint64 // when it was last asked (deltaLog.clock)
	// the encoded answers for cur: the reset, and the deltas by the index they start from
	reset  []byte
	deltas map[int64][]byte
}

// deltaLog holds the histories of the queries delta watchers asked.
type deltaLog struct {
	mu    sync.Mutex
	m     map[string]*queryHistory
	clock uint64
}

func newDeltaLog() *deltaLog { return &deltaLog{m: map[string]*queryHistory{}} }

// history returns the history of key, made empty if there is none.
func (d *deltaLog) history(key string) *queryHistory {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clock++
	h := d.m[key]
	if h == nil {
		if len(d.m) >= maxDeltaQueries {
			d.evictLocked()
		}
		h = &queryHistory{}
		d.m[key] = h
	}
	h.used = d.clock
	return h
}

// evictLocked drops the least recently asked half of the histories.
func (d *deltaLog) evictLocked() {
	used := make([]uint64, 0, len(d.m))
	for _, h := range d.m {
		used = append(used, h.used) // a racy read of another history's clock is harmless: it only orders
	}
	slices.Sort(used)
	cut := used[len(used)/2]
	for k, h := range d.m {
		if h.used <= cut {
			delete(d.m, k)
		}
	}
}

// newAnswerSet indexes ans.
func newAnswerSet(ans *registry.Answer, generation int64) *answerSet {
	s := &answerSet{state: ans.State, entries: make(map[entryKey]entryState, len(ans.Entries)),
		instances: make(map[string]*registry.Record, len(ans.Entries)), order: ans.Entries, removed: ans.Removed, generation: generation}
	for _, e := range ans.Entries {
		s.entries[entryKey{e.Record.InstanceID, e.Cap}] = stateOf(e)
		s.instances[e.Record.InstanceID] = e.Record
	}
	return s
}

// diff is the step from a to b (same epoch).
func diff(a, b *answerSet) step {
	st := step{from: a.state.Revision, to: b.state.Revision, fromGeneration: a.generation}
	// an instance whose incarnation changed, or one of whose entries left while others stay,
	// is removed whole and its entries put again
	replaced := map[string]bool{}
	for id, rec := range a.instances {
		nrec, ok := b.instances[id]
		if !ok || nrec != rec {
			st.removed = append(st.removed, apiv1.Removal{InstanceID: id, Generation: rec.Generation})
			replaced[id] = ok
		}
	}
	for k := range a.entries {
		if _, ok := b.entries[k]; !ok && !replaced[k.instance] {
			if _, stays := b.instances[k.instance]; stays {
				st.removed = append(st.removed, apiv1.Removal{InstanceID: k.instance, Generation: a.instances[k.instance].Generation})
				replaced[k.instance] = true
			}
		}
	}
	for _, e := range b.order {
		k := entryKey{e.Record.InstanceID, e.Cap}
		old, had := a.entries[k]
		switch {
		case replaced[k.instance] || !had:
			st.upserts = append(st.upserts, upsert{key: k, entry: e})
		case old != stateOf(e):
			st.upserts = append(st.upserts, upsert{key: k, entry: e, updated: true})
		}
	}
	slices.SortFunc(st.removed, byInstance)
	return st
}

// byInstance orders removals by instance id.
func byInstance(x, y apiv1.Removal) int {
	switch {
	case x.InstanceID < y.InstanceID:
		return -1
	case x.InstanceID > y.InstanceID:
		return 1
	}
	return 0
}

// advance makes ans the history's current answer, keeping the step from the previous one
// when it is of the same epoch.
func (h *queryHistory) advance(ans *registry.Answer, generation int64) {
	next := newAnswerSet(ans, generation)
	prev := h.cur
	h.cur, h.reset, h.deltas = next, nil, nil
	if prev == nil || prev.state.Epoch != next.state.Epoch || prev.state.Revision > next.state.Revision {
		h.steps = nil
		return
	}
	if prev.state.Revision == next.state.Revision && prev.state.Complete == next.state.Complete {
		h.cur = prev // nothing moved
		return
	}
	h.steps = append(h.steps, diff(prev, next))
	if len(h.steps) > maxDeltaSteps {
		h.steps = slices.Delete(h.steps, 0, len(h.steps)-maxDeltaSteps)
	}
}

// since folds the steps after index into one: ok is false when the history does not reach
// back to index (a reset is due).
func (h *queryHistory) since(index int64) (st step, baseGeneration int64, ok bool) {
	if h.cur.state.Revision == index {
		return step{from: index, to: index}, h.cur.generation, true
	}
	first := -1
	for i, s := range h.steps {
		if s.from == index {
			first = i
			break
		}
	}
	if first < 0 {
		return step{}, 0, false
	}
	st = step{from: index, to: h.cur.state.Revision}
	removedGen := map[string]int64{}
	puts := map[entryKey]int{}        // index in st.upserts
	byInst := map[string][]entryKey{} // the keys put, by instance
	for _, s := range h.steps[first:] {
		for _, r := range s.removed {
			removedGen[r.InstanceID] = max(removedGen[r.InstanceID], r.Generation)
			// entries put by an earlier step, of this incarnation or an older one, are gone again
			keep := byInst[r.InstanceID][:0]
			for _, k := range byInst[r.InstanceID] {
				if i := puts[k]; st.upserts[i].entry.Record.Generation <= r.Generation {
					st.upserts[i].entry.Record = nil // dropped below
					delete(puts, k)
					continue
				}
				keep = append(keep, k)
			}
			byInst[r.InstanceID] = keep
		}
		for _, u := range s.upserts {
			if i, ok := puts[u.key]; ok {
				st.upserts[i].entry = u.entry // the latest form; its first kind stays
				continue
			}
			_, dropped := removedGen[u.key.instance]
			u.updated = u.updated && !dropped
			puts[u.key] = len(st.upserts)
			byInst[u.key.instance] = append(byInst[u.key.instance], u.key)
			st.upserts = append(st.upserts, u)
		}
	}
	st.upserts = slices.DeleteFunc(st.upserts, func(u upsert) bool { return u.entry.Record == nil })
	st.removed = sortedRemovalList(removedGen)
	return st, h.steps[first].fromGeneration, true
}

// appendDelta writes the delta st at the current answer as JSON.
func appendDelta(b []byte, cur *answerSet, st step, warmUp []apiv1.Removal) ([]byte, error) {
	b = append(b, `{"registry_epoch":`...)
	b = apijson.String(b, cur.state.Epoch)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, cur.state.Revision, 10)
	b = append(b, `,"complete":`...)
	b = strconv.AppendBool(b, cur.state.Complete)
	var err error
	for _, kind := range []struct {
		name    string
		updated bool
	}{{"added", false}, {"updated", true}} {
		b = append(b, `,"`...)
		b = append(b, kind.name...)
		b = append(b, `":[`...)
		n := 0
		for _, u := range st.upserts {
			if u.updated != kind.updated {
				continue
			}
			if n > 0 {
				b = append(b, ',')
			}
			n++
			if b, err = appendEntry(b, u.entry); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"removed":[`...)
	removed := st.removed
	if len(warmUp) > 0 {
		removed = mergeRemovals(removed, warmUp)
	}
	for i, r := range removed {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"instance_id":`...)
		b = apijson.String(b, r.InstanceID)
		b = append(b, `,"generation":`...)
		b = strconv.AppendInt(b, r.Generation, 10)
		b = append(b, '}')
	}
	return append(b, "]}\n"...), nil
}

// mergeRemovals is the union of two removal lists sorted by instance id, the higher
// generation of an instance in both.
func mergeRemovals(a, b []apiv1.Removal) []apiv1.Removal {
	m := make(map[string]int64, len(a)+len(b))
	for _, r := range a {
		m[r.InstanceID] = max(m[r.InstanceID], r.Generation)
	}
	for _, r := range b {
		m[r.InstanceID] = max(m[r.InstanceID], r.Generation)
	}
	return sortedRemovalList(m)
}

func sortedRemovalList(m map[string]int64) []apiv1.Removal {
	out := make([]apiv1.Removal, 0, len(m))
	for id, g := range m {
		out = append(out, apiv1.Removal{InstanceID: id, Generation: g})
	}
	slices.SortFunc(out, byInstance)
	return out
}

// appendReset writes the whole current answer as a delta watch's reset: the discovery answer
// with "reset": true.
func appendReset(b []byte, cur *answerSet) ([]byte, error) {
	ans := registry.Answer{State: cur.state, Entries: cur.order, Removed: cur.removed}
	body, err := appendDiscovery(nil, &ans)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"reset":true,`...)
	return append(b, body[1:]...), nil
}

// deltaAnswer answers a delta watch of key at index (of epoch): the changes since the answer
// at index, or the whole answer as a reset. query reads the answer now.
func (s *Server) deltaAnswer(w http.ResponseWriter, key string, index int64, epoch string, query func() registry.Answer) (any, error) {
	h := s.deltas.history(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	st := s.reg.State()
	if h.cur == nil || h.cur.state != st {
		gen := s.reg.Store().Generation() // before the read: every incarnation above it is newer than the answer
		ans := query()
		s.metrics.encodes.WithLabelValues("capabilities").Inc()
		h.advance(&ans, gen)
	}
	cur := h.cur
	var body []byte
	var err error
	change, base, ok := step{}, int64(0), false
	if index > 0 && (epoch == "" || epoch == cur.state.Epoch) { // index 0: the watcher holds nothing yet
		change, base, ok = h.since(index)
	}
	kind := "delta"
	switch {
	case !ok:
		kind = "reset"
		if h.reset == nil {
			if h.reset, err = appendReset(nil, cur); err != nil {
				return nil, err
			}
		}
		body = h.reset
	default:
		if body = h.deltas[index]; body == nil {
			var warmUp []apiv1.Removal
			if !cur.state.Complete {
				for _, r := range cur.removed {
					if r.Generation > base {
						warmUp = append(warmUp, r)
					}
				}
			}
			if body, err = appendDelta(nil, cur, change, warmUp); err != nil {
				return nil, err
			}
			if h.deltas == nil {
				h.deltas = map[int64][]byte{}
			}
			h.deltas[index] = body
		}
	}
	s.metrics.deltas.WithLabelValues(kind).Inc()
	w.Header().Set("X-Registry-Revision", strconv.FormatInt(cur.state.Revision, 10))
	w.Header().Set("Cache-Control", "no-cache")
	httpapi.WriteEncoded(w, http.StatusOK, body)
	return written{}, nil
}
