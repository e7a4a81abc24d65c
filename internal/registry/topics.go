package registry

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshflows/meshflows/internal/health"
)

// Changes is what one move of a store's revision changed: the services and capabilities of
// the records put, removed or touched since the previous move (a record replaced by one of
// another service names both), whether one of them is an input of the gateways' routes,
// whether one was removed, and All when the change is not of named records (a restore, a
// reset of the view, a ramp clock that weighs the whole fleet again). The lists may repeat a
// name; the callee must not keep them.
type Changes struct {
	Services     []string
	Capabilities []string
	// Instances are the ids of the records put, removed or touched.
	Instances []string
	Routed    bool
	Removed   bool
	All       bool
}

// ChangePublisher is a Store that says, each time its revision moves, what changed
// (storeindex.Index does, for both stores). It calls the function given to OnPublish with the
// new revision and the changes, under the lock its writers hold: the function must be quick
// and must not call the store. Without one, every long poll waits on the whole fleet's
// revision.
type ChangePublisher interface {
	OnPublish(func(revision int64, c Changes))
}

// Topic is what a long poll waits for a change of: the answer of one service (every query
// that names a service_name), of one capability (a query that names a capability_id and no
// service), the routes' inputs, or, the zero Topic, anything in the fleet. A change of any
// instance of the service (its record, its lease's end, its self-reported health, its verdict
// or weight) moves its service's topic; a panic flag or a change the store does not attribute
// moves every topic. Matching a query's other filters is not attempted: a poll on a service
// may be answered by a change of another capability of that service, never by another
// service.
type Topic struct {
	kind byte // 0: the fleet; 's' service, 'c' capability, 'r' routes
	name string
}

// TopicOf is the topic of the answer to q.
func TopicOf(q *Query) Topic {
	switch {
	case q.ServiceName != "":
		return Topic{kind: 's', name: q.ServiceName}
	case q.CapabilityID != "":
		return Topic{kind: 'c', name: q.CapabilityID}
	}
	return Topic{}
}

// RoutesTopic is the topic of the routes answer (Registry.Routes).
var RoutesTopic = Topic{kind: 'r'}

// topics keeps, per topic, the revision of its last change and a channel closed at its next
// one, so that a change wakes the long polls whose answer it changes, not every poll of the
// fleet. Revisions are the registry's (the store's plus the monitor's, or the store's alone
// with a shared store): a topic's is the registry's revision just after its change was
// applied, so an answer built before the change has a lower one.
type topics struct {
	// storeRev and judgedRev are the store's and the monitor's revisions as their last
	// publication left them; their sum is the registry's revision (judgedRev stays 0 with a
	// shared store, whose revision holds the verdicts).
	storeRev, judgedRev atomic.Int64
	// attributed is false until the store publishes its changes (ChangePublisher): then a
	// topic's poll waits on the fleet.
	attributed bool

	mu   sync.Mutex
	m    map[Topic]*topicState
	all  int64         // the last revision at which every topic changed
	wake chan struct{} // closed when every topic changes
}

type topicState struct {
	rev  int64
	wake chan struct{} // nil until a poll waits
}

func newTopics() *topics {
	return &topics{m: map[Topic]*topicState{}, wake: make(chan struct{})}
}

// maxIdleTopics bounds the topics kept without a waiter; past it those are dropped and the
// fleet-wide revision stands for them (a dropped topic's poll is answered once, at most, for
// a change that was not its own).
const maxIdleTopics = 1 << 16

// watch returns the revision of t's last change and a channel closed at its next one (or at
// the next change of every topic).
func (ts *topics) watch(t Topic) (rev int64, topic, all <-chan struct{}) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	s := ts.m[t]
	if s == nil {
		s = &topicState{}
		ts.m[t] = s
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return max(s.rev, ts.all), s.wake, ts.wake
}

// markStore records a move of the store's revision to rev with its changes.
func (ts *topics) markStore(rev int64, c Changes) {
	storeMax(&ts.storeRev, rev)
	at := rev + ts.judgedRev.Load()
	if c.All {
		ts.markAll(at)
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, s := range c.Services {
		ts.markLocked(Topic{kind: 's', name: s}, at)
	}
	for _, n := range c.Capabilities {
		ts.markLocked(Topic{kind: 'c', name: n}, at)
	}
	if c.Routed {
		ts.markLocked(RoutesTopic, at)
	}
}

// markJudged records a move of the monitor's revision to rev: services and capabilities are
// those of the instances whose verdict changed, routed whether one of them is a routes input,
// all a change of every answer (a panic flag).
func (ts *topics) markJudged(rev int64, services, capabilities []string, routed, all bool) {
	storeMax(&ts.judgedRev, rev)
	at := ts.storeRev.Load() + rev
	if all {
		ts.markAll(at)
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, s := range services {
		ts.markLocked(Topic{kind: 's', name: s}, at)
	}
	for _, n := range capabilities {
		ts.markLocked(Topic{kind: 'c', name: n}, at)
	}
	if routed {
		ts.markLocked(RoutesTopic, at)
	}
}

func (ts *topics) markLocked(t Topic, at int64) {
	s := ts.m[t]
	if s == nil {
		if len(ts.m) >= maxIdleTopics {
			ts.dropIdleLocked(at)
		}
		s = &topicState{}
		ts.m[t] = s
	}
	s.rev = max(s.rev, at)
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// dropIdleLocked forgets the topics no poll waits on, and has the fleet-wide revision stand
// for them: a poll on one of them later is answered at the next change of its own, or once
// at once if it holds an answer older than at.
func (ts *topics) dropIdleLocked(at int64) {
	for t, s := range ts.m {
		if s.wake == nil {
			delete(ts.m, t)
		}
	}
	ts.all = max(ts.all, at)
}

// markAll moves every topic to at and wakes every poll.
func (ts *topics) markAll(at int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.all = max(ts.all, at)
	close(ts.wake)
	ts.wake = make(chan struct{})
	for t, s := range ts.m {
		if s.wake == nil {
			delete(ts.m, t) // the fleet-wide revision stands for it
			continue
		}
		s.rev = max(s.rev, at)
		close(s.wake)
		s.wake = nil
	}
}

// changeLog keeps the instances each revision changed, the newest maxLogged of them, so that
// a delta watch from revision N is answered from the instances changed since N alone
// (ChangesOf), whatever the size of the answer. A change it cannot attribute (a panic
// flag, a restore) is logged as every instance.
type changeLog struct {
	mu sync.Mutex
	// ring holds (revision, instance) pairs in the order they were logged; start is the
	// oldest, n how many; since is the revision up to which the log says nothing (every
	// change after it is in the ring, or after all).
	ring  []loggedChange
	start int
	n     int
	since int64
	all   int64 // the last revision at which every instance changed
}

type loggedChange struct {
	rev   int64
	id    string
	batch changeBatch // what the change it was part of touched (its names shared by the batch)
}

// changeBatch names what one publication touched — the services and capabilities of every
// instance it changed, before and after, as the long polls' topics are woken from them — so
// that a delta watch of one service or capability is answered with the instances whose
// change may touch its answer, not with every instance the fleet changed meanwhile.
type changeBatch struct {
	names     []string // the services, then the capabilities
	nServices int
}

// newChangeBatch copies services and capabilities (their callers reuse them) into one slice.
func newChangeBatch(services []string, capabilities ...string) changeBatch {
	names := make([]string, 0, len(services)+len(capabilities))
	return changeBatch{names: append(append(names, services...), capabilities...), nServices: len(services)}
}

// touches says whether the batch may change the answers of topic t (the fleet's and the
// routes' topics: always).
func (b *changeBatch) touches(t Topic) bool {
	switch t.kind {
	case 's':
		return slices.Contains(b.names[:b.nServices], t.name)
	case 'c':
		return slices.Contains(b.names[b.nServices:], t.name)
	}
	return true
}

// maxLogged is how many instance changes the log keeps: at 667 changes a second (each a
// deregistration and a registration, each also a verdict), some 40 s of an evacuation. A
// variable for the tests.
var maxLogged = 1 << 16

func (l *changeLog) add(rev int64, ids, services, capabilities []string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if all {
		l.all = max(l.all, rev)
		return
	}
	if len(ids) > 0 {
		l.addLocked(rev, ids, newChangeBatch(services, capabilities...))
	}
}

// addVerdicts logs the instances a publication of verdicts changed, each with its own service
// and capabilities (a batch of verdicts spans the fleet), under one hold of the lock.
func (l *changeLog) addVerdicts(rev int64, touched []health.Instance, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if all {
		l.all = max(l.all, rev)
	}
	for i := range touched {
		in := &touched[i]
		l.addLocked(rev, []string{in.ID}, newChangeBatch([]string{in.Service}, in.Capabilities...))
	}
}

// addLocked appends ids, changed at rev by batch, dropping the oldest past maxLogged.
func (l *changeLog) addLocked(rev int64, ids []string, batch changeBatch) {
	if l.ring == nil {
		l.ring = make([]loggedChange, maxLogged)
	}
	for _, id := range ids {
		if l.n == len(l.ring) {
			l.since = max(l.since, l.ring[l.start].rev) // the oldest goes
			l.ring[l.start] = loggedChange{}
			l.start = (l.start + 1) % len(l.ring)
			l.n--
		}
		l.ring[(l.start+l.n)%len(l.ring)] = loggedChange{rev: rev, id: id, batch: batch}
		l.n++
	}
}

// ChangesOf returns the instances changed after index by a change that touched topic t's
// service or capability (TopicOf; the fleet's topic, Topic{}, takes every change), each once,
// or false when the log cannot tell them: index is older than what it keeps, or every
// instance changed since.
func (r *Registry) ChangesOf(index int64, t Topic) (ids []string, ok bool) {
	l := &r.changes2
	l.mu.Lock()
	defer l.mu.Unlock()
	if !r.topics.attributed || index < l.since || index < l.all {
		return nil, false
	}
	seen := map[string]struct{}{}
	// newest first, back to index
	for i := l.n - 1; i >= 0; i-- {
		c := l.ring[(l.start+i)%len(l.ring)]
		if c.rev <= index {
			break
		}
		if !c.batch.touches(t) {
			continue
		}
		if _, dup := seen[c.id]; !dup {
			seen[c.id] = struct{}{}
			ids = append(ids, c.id)
		}
	}
	return ids, true
}

// storeMax moves a to v unless it is there or past it already.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// EntriesOf returns the answer to q as it holds for the instances ids alone, judged and in
// answer order (Query's), with the state it was read at: what a delta watch sends of the
// instances that changed.
func (r *Registry) EntriesOf(q *Query, ids []string) Answer {
	st := r.State()
	var es []Entry
	for _, id := range ids {
		rec, ok := r.store.Get(id)
		if !ok {
			continue
		}
		for i := range rec.Capabilities {
			if q.Matches(rec, &rec.Capabilities[i]) {
				es = append(es, Entry{Record: rec, Cap: i})
			}
		}
	}
	es, _ = r.judge(es, q.IncludeAll, false)
	SortEntries(es)
	return Answer{State: st, Entries: es}
}

// Generation returns the generation of the incarnation of id the registry holds (false: none).
func (r *Registry) Generation(id string) (int64, bool) {
	rec, ok := r.store.Get(id)
	if !ok {
		return 0, false
	}
	return rec.Generation, true
}
