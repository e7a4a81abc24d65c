package health

import (
	"container/heap"
	"time"
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

// deadlineQueue is a min-heap of (instant, instance incarnation). Entries are never removed
// in place: whoever pops one checks that it still holds (same incarnation, same state).
type deadlineQueue struct{ h deadlineHeap }

type deadline struct {
	at  int64 // Unix nanoseconds
	in  *instance
	seq uint64
}

func (q *deadlineQueue) push(at time.Time, in *instance) {
	heap.Push(&q.h, deadline{at: at.UnixNano(), in: in, seq: in.seq})
}

// due reports whether the earliest entry is at or before t.
func (q *deadlineQueue) due(t time.Time) bool {
	return len(q.h) > 0 && q.h[0].at <= t.UnixNano()
}

// pop removes the earliest entry.
func (q *deadlineQueue) pop() (time.Time, *instance, uint64) {
	d := heap.Pop(&q.h).(deadline)
	return time.Unix(0, d.at), d.in, d.seq
}

func (q *deadlineQueue) len() int { return len(q.h) }

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = deadline{} // no pointer kept past the end
	*h = old[:len(old)-1]
	return d
}

// dueQueue is the monitor's min-heap of views by the instant their verdict may next change
// by itself. A view has at most one live entry (at view.queuedAt); others are stale and
// dropped when they come out.
type dueQueue struct {
	h     dueHeap
	batch []*view
}

type dueEntry struct {
	at int64 // Unix nanoseconds; math.MinInt64 for at once
	v  *view
}

func (q *dueQueue) push(at int64, v *view) { heap.Push(&q.h, dueEntry{at: at, v: v}) }

// takeDue removes the entries at or before now and returns their views, each once, no
// longer queued. The slice is the queue's own: give it back with recycle.
func (q *dueQueue) takeDue(now time.Time) []*view {
	limit := now.UnixNano()
	out := q.batch[:0]
	for len(q.h) > 0 && q.h[0].at <= limit {
		d := heap.Pop(&q.h).(dueEntry)
		if v := d.v; !v.gone && v.queued && v.queuedAt == d.at {
			v.queued = false
			out = append(out, v)
		}
	}
	return out
}

// recycle takes back the slice takeDue returned.
func (q *dueQueue) recycle(b []*view) {
	clear(b)
	q.batch = b[:0]
}

func (q *dueQueue) len() int { return len(q.h) }

type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = dueEntry{}
	*h = old[:len(old)-1]
	return d
}
