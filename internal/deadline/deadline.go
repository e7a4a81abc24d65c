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
	// low is the fewest entries held since the last compaction (Tidy): a compaction waits
	// until the queue has grown to twice that, so that its cost is paid by as many pushes.
	low int
}

// tidyMin is the length below which Tidy never compacts: a small queue's stale entries
// cost less than looking at them.
const tidyMin = 1024

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
	q.low = min(q.low, n)
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
	q.low = 0
}

// Tidy drops the entries keep rejects, once the queue holds more than twice live entries
// (as many as its owner can still need) and twice as many as at its emptiest since it last
// did. keep must reject only entries that can never hold again: those the owner would drop
// when they came out.
//
// An owner whose entries go stale in place calls it after each push. Without it, an item
// replaced or removed stays queued, with everything it references, until its instant: a
// registry whose providers re-register over and over held every replaced record for a lease
// TTL, hundreds of megabytes at ten thousand re-registrations a second. With it, the queue
// stays within about twice what is live, and each compaction, O(n), comes after at least
// n/2 pushes.
//
// It reports how many entries it dropped.
func (q *Queue[T]) Tidy(live int, keep func(at int64, v T) bool) int {
	n := len(q.h)
	if n <= tidyMin || n <= 2*live || n <= 2*q.low {
		return 0
	}
	kept := q.h[:0]
	for _, e := range q.h {
		if keep(e.at, e.v) {
			kept = append(kept, e)
		}
	}
	clear(q.h[len(kept):n]) // no reference kept past the end
	if cap(q.h) > 4*len(kept) && cap(q.h) > tidyMin {
		kept = append(make([]entry[T], 0, 2*len(kept)), kept...) // give back what a storm grew
	}
	q.h = kept
	for i := len(q.h)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
	q.low = len(q.h)
	return n - len(q.h)
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
