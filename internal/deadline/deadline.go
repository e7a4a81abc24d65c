// Package deadline owns waiting for instants: the queues of things due at an instant (a
// min-heap of values by Unix-nanosecond instant, used where a sweep must look only at what
// is due — lease ends, verdicts that may change by themselves — instead of walking
// everything), and Sleep, a wait that ends with its context.
package deadline

// Queue is a min-heap of values by instant. Entries are never removed in place: the owner
// checks an entry it pops still holds and drops it otherwise. The zero Queue is empty.
type Queue[T any] struct {
	h []entry[T]
}

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
