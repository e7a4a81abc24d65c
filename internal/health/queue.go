package health

import (
	"time"

	"github.com/meshflows/meshflows/internal/deadline"
)

// liveness is how the renewal expectation counts an instance.
type liveness uint8

const (
	notCounted liveness = iota // not expected to renew: absent, draining, or never renewed
	liveYoung                  // registered less than a window ago: owes part of a window
	liveOld                    // registered a window ago or more: owes a whole window
)

// renewalLog holds the instants of the renewals within the last window, oldest first, as
// Unix nanoseconds (8 bytes each, where a time.Time takes 24). Instants are appended in time
// order and dropped from the front.
type renewalLog struct {
	at   []int64
	head int
}

func (l *renewalLog) add(t time.Time) {
	if l.head > 0 && l.head >= len(l.at)/2 { // reuse the dropped half instead of growing
		n := copy(l.at, l.at[l.head:])
		l.at, l.head = l.at[:n], 0
	}
	l.at = append(l.at, t.UnixNano())
}

// dropThrough drops the renewals at or before t.
func (l *renewalLog) dropThrough(t time.Time) {
	limit := t.UnixNano()
	for l.head < len(l.at) && l.at[l.head] <= limit {
		l.head++
	}
	if l.head == len(l.at) {
		l.at, l.head = l.at[:0], 0
	}
}

func (l *renewalLog) len() int { return len(l.at) - l.head }

func (l *renewalLog) reset() { l.at, l.head = l.at[:0], 0 }

// instanceQueue holds instance incarnations by an instant (their lease end, or the end of
// their first window). Entries are never removed in place: whoever pops one checks that it
// still holds (same incarnation, same state).
type instanceQueue struct{ q deadline.Queue[incarnation] }

// incarnation names one incarnation of an instance.
type incarnation struct {
	in  *instance
	seq uint64
}

// pushAt queues in's incarnation at an instant in Unix nanoseconds. Once the queue holds
// more than live entries, it removes a few of those keep rejects (deadline's Tidy): keep
// must reject only entries that can never hold again.
func (q *instanceQueue) pushAt(at int64, in *instance, live int, keep func(at int64, inc incarnation) bool) {
	q.q.Push(at, incarnation{in, in.seq})
	q.q.Tidy(live, keep)
}

// due reports whether the earliest entry is at or before t.
func (q *instanceQueue) due(t time.Time) bool { return q.q.Due(t.UnixNano()) }

// pop removes the earliest entry.
func (q *instanceQueue) pop() (int64, incarnation) { return q.q.Pop() }

// leaseHolds reports whether an entry of the lease queue still names a lease that can end:
// the same incarnation, present, not draining. One that does not never will again (a new
// incarnation has a new seq).
func leaseHolds(_ int64, inc incarnation) bool {
	in := inc.in
	return in.seq == inc.seq && !in.gone && in.present && !in.draining
}

// youngHolds reports whether an entry of the young queue still names an instance counted as
// young that registered at its instant. An incarnation is counted young once at most, so one
// that does not never will again.
func youngHolds(at int64, inc incarnation) bool {
	in := inc.in
	return in.seq == inc.seq && in.live == liveYoung && in.registeredAt == at
}

func (q *instanceQueue) len() int { return q.q.Len() }

// dueQueue is the monitor's queue of views by the instant their verdict may next change by
// itself. A view has at most one live entry (at view.queuedAt); others are stale and dropped
// when they come out.
//
// A view due by the last takeDue's limit when it is pushed goes to a plain list, not the
// heap, and so does one due at a ramp slot (a view in slow start, weighed again once per
// ramp step at its service's slot: see Monitor.nextSlot): a million views in slow start
// after a registry restart were a million heap pops and pushes a sweep, 65 ms of a 235 ms
// sweep.
type dueQueue struct {
	q     deadline.Queue[*view]
	next  []dueEntry // due at the next sweep, in the order pushed
	spare []dueEntry // next's other buffer: takeDue walks one while pushes fill the other
	limit int64      // the limit of the takeDue running or last run
	// slots hold the entries due at a ramp slot's instant (a multiple of width whose index
	// modulo rampSlots is the slot), at most one ramp step ahead; taken is the index of the
	// last slot instant a takeDue reached. width 0: no slots.
	slots     [rampSlots][]dueEntry
	slotSpare []dueEntry // a slot's other buffer while takeDue walks it
	width     int64
	taken     int64
}

// rampSlots is RampSlots, for the monitor's own arithmetic.
const rampSlots = RampSlots

// RampSlots is how many slots a ramp step is cut into (see MonitorConfig.RampStep): the
// services' ramps are weighed in turn, a fiftieth of them at each fiftieth of the step
// (20 ms at the default 1 s), instead of all at once; the registry advances the monitor at
// each. Ten slots (100 ms apart) left bursts of some 60 services' answers at 60,000
// instances under an evacuation's churn, which an xDS server turned into bursts of pushes. A
// service's slot is a uint8: at most 256 slots.
const RampSlots = 50

// dueEntry is one entry of dueQueue.next.
type dueEntry struct {
	at int64
	v  *view
}

// push queues v at an instant. live is how many views the monitor holds: past it (and
// deadline's margin) a few stale entries are removed per push, so that a forgotten view,
// whose entry is due at its silence or lease deadline, is not kept until then with all it
// references (under an evacuation's churn and a 15-minute lease: hundreds of megabytes).
func (q *dueQueue) push(at int64, v *view, live int) {
	switch {
	case at <= q.limit:
		q.next = append(q.next, dueEntry{at, v})
		return
	case q.width > 0 && at%q.width == 0 && at/q.width > q.taken && at/q.width <= q.taken+2*rampSlots:
		// a ramp slot's instant within two steps (one further off, rare, goes to the heap)
		k := at / q.width
		q.slots[k%rampSlots] = append(q.slots[k%rampSlots], dueEntry{at, v})
		return
	}
	q.q.Push(at, v)
	q.q.Tidy(live, dueHolds)
}

// dueHolds reports whether an entry of the due queue is its view's live one: a forgotten
// view, or one queued again at another instant, never takes it again.
func dueHolds(at int64, v *view) bool { return !v.gone && v.queued && v.queuedAt == at }

// takeDue removes the entries at or before now and calls fn with their views, each once,
// no longer queued, as it finds them: the view is in the cache when fn reads it (a million
// views in slow start, walked once to be taken and again to be judged, missed it twice).
// A view fn pushes at or before now is due at the next takeDue, not this one.
func (q *dueQueue) takeDue(now time.Time, fn func(*view)) {
	limit := now.UnixNano()
	q.limit = limit
	cur := q.next
	q.next = q.spare[:0]
	q.walk(cur, limit, fn, &q.next)
	q.spare = cur[:0]
	if q.width > 0 {
		// the slots whose instants came since the last takeDue: each once, even when more
		// than a step has passed
		k := limit / q.width
		from := max(q.taken+1, k-rampSlots+1)
		q.taken = max(q.taken, k) // before fn pushes views at their next slots
		for i := from; i <= k; i++ {
			s := i % rampSlots
			cur := q.slots[s]
			q.slots[s] = q.slotSpare[:0]
			q.walk(cur, limit, fn, &q.slots[s])
			q.slotSpare = cur[:0]
		}
	}
	for q.q.Due(limit) {
		at, v := q.q.Pop()
		if dueHolds(at, v) {
			v.queued = false
			fn(v)
		}
	}
}

// walk calls fn with the views of list's live entries due by limit, appends those not due
// yet to *keep (which fn's pushes may append to as well) and drops stale ones; it leaves
// list zeroed, to be reused.
func (q *dueQueue) walk(list []dueEntry, limit int64, fn func(*view), keep *[]dueEntry) {
	for i, e := range list {
		list[i] = dueEntry{}
		switch v := e.v; {
		case !dueHolds(e.at, v): // stale
		case e.at > limit: // pushed by a clock ahead of this sweep's, or due at a later step
			*keep = append(*keep, e)
		default:
			v.queued = false
			fn(v)
		}
	}
}

func (q *dueQueue) len() int {
	n := q.q.Len() + len(q.next)
	for _, s := range q.slots {
		n += len(s)
	}
	return n
}
