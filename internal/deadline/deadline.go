// Package deadline owns waiting for instants: the queues of things due at an instant (a
// min-heap of values by Unix-nanosecond instant, used where a sweep must look only at what
// is due — lease ends, verdicts that may change by themselves — instead of walking
// everything), and Sleep, a wait that ends with its context.
package deadline

// Queue is a min-heap of values by instant. Entries are never removed in place: the owner
// checks an entry it pops still holds and drops it otherwise, and calls Tidy after a push so
// that entries gone stale do not pile up until their instant. The zero Queue is empty.
type Queue[T any] struct {
	h []entry[T]
	// next is where Tidy looks next: it goes round the heap's array.
	next int
}

const (
	// tidyMin is how many entries over its owner's live count a queue may hold before Tidy
	// looks at any: a few stale entries cost less than looking for them.
	tidyMin = 1024
	// tidyStep is how many entries one Tidy looks at. Where each push makes one entry stale
	// (a re-registration), a queue stays within about tidyStep/(tidyStep-1) times its live
	// entries.
	tidyStep = 4
)

type entry[T any] struct {
	at int64
	v  T
}

// Push adds v at instant at.
func (q *Queue[T]) Push(at int64, v T) {
	q.h = append(q.h, entry[T]{at, v})
	q.up(len(q.h) - 1)
}

// Due reports whether the earliest entry is at or before limit.
func (q *Queue[T]) Due(limit int64) bool { return len(q.h) > 0 && q.h[0].at <= limit }

// Pop removes and returns the earliest entry. The queue must not be empty.
func (q *Queue[T]) Pop() (int64, T) {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = entry[T]{} // no reference kept past the end
	q.h = q.h[:n]
	if n > 0 {
		q.down(0)
	}
	return top.at, top.v
}

// Len returns how many entries the queue holds.
func (q *Queue[T]) Len() int { return len(q.h) }

// Reset empties the queue.
func (q *Queue[T]) Reset() {
	clear(q.h)
	q.h = q.h[:0]
	q.next = 0
}

// Tidy looks at the next few entries (tidyStep), going round the queue from where it last
// stopped, and removes those keep rejects; it does nothing while the queue holds at most
// tidyMin entries more than live, as many as its owner can still need. keep must reject
// only entries that can never hold again: those the owner would drop when they came out.
//
// An owner whose entries go stale in place calls it after each push. Without it, an item
// replaced or removed stays queued, with everything it references, until its instant: a
// registry whose providers re-register over and over held every replaced record for a lease
// TTL, hundreds of megabytes at ten thousand re-registrations a second. A compaction of the
// whole queue instead, once it held twice what was live, stalled a registry of a million
// instances for 0.9 s under its store's lock. Looking at a few entries per push costs
// O(log n) per push at most and never stalls.
//
// It reports how many entries it removed.
func (q *Queue[T]) Tidy(live int, keep func(at int64, v T) bool) int {
	if len(q.h) <= live+tidyMin {
		return 0
	}
	removed := 0
	for range tidyStep {
		if q.next >= len(q.h) {
			q.next = 0
		}
		if e := q.h[q.next]; keep(e.at, e.v) {
			q.next++
			continue
		}
		q.removeAt(q.next) // the entry that takes its place is looked at next
		removed++
	}
	return removed
}

// removeAt removes the entry at index i of the heap.
func (q *Queue[T]) removeAt(i int) {
	n := len(q.h) - 1
	q.h[i] = q.h[n]
	q.h[n] = entry[T]{} // no reference kept past the end
	q.h = q.h[:n]
	if i < n {
		q.down(i)
		q.up(i)
	}
}

// Walk calls fn for every entry at or before limit, without removing them, in no particular
// order: it visits only the part of the heap that is due.
func (q *Queue[T]) Walk(limit int64, fn func(at int64, v T)) {
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(q.h) || q.h[i].at > limit {
			continue
		}
		fn(q.h[i].at, q.h[i].v)
		stack = append(stack, 2*i+1, 2*i+2)
	}
}

func (q *Queue[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if q.h[p].at <= q.h[i].at {
			return
		}
		q.h[p], q.h[i] = q.h[i], q.h[p]
		i = p
	}
}

func (q *Queue[T]) down(i int) {
	n := len(q.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.h[r].at < q.h[l].at {
			m = r
		}
		if q.h[i].at <= q.h[m].at {
			return
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
}
