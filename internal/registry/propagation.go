package registry

import (
	"sync"
	"sync/atomic"
	"time"
)

// The second half of the withdrawal budget: from a withdrawal verdict's publication to each
// watcher answered with it. The monitor tells the publications that carry a withdrawal
// (health.Monitor.OnWithdrawalPublished); each long poll, as it is released with an answer at
// or past one such revision while it held an older one, observes the time since that verdict
// in meshflows_withdrawal_propagation_seconds. The slowest watcher is the histogram's top.

// withdrawalPublisher is the part of an Eligibility that tells the publications carrying a
// withdrawal (health.Monitor has it).
type withdrawalPublisher interface {
	OnWithdrawalPublished(fn func(rev int64, verdictAt time.Time))
}

// withdrawalRevs is how many recent withdrawal publications are kept: a watcher further
// behind is answered a reset anyway, and counted for the ones kept.
const withdrawalRevs = 256

// withdrawalLog holds the recent publications that carried a withdrawal, by revision.
type withdrawalLog struct {
	latest atomic.Int64 // the newest revision held; 0: none
	mu     sync.Mutex
	revs   [withdrawalRevs]int64
	ats    [withdrawalRevs]time.Time
	next   int
}

func (l *withdrawalLog) add(rev int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.revs[l.next], l.ats[l.next] = rev, at
	l.next = (l.next + 1) % withdrawalRevs
	l.latest.Store(rev)
}

// since calls fn with the verdict time of every withdrawal in (index, rev].
func (l *withdrawalLog) since(index, rev int64, fn func(time.Time)) {
	if l.latest.Load() <= index {
		return // the hot path: nothing withdrawn since the answer the watcher held
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range withdrawalRevs {
		if r := l.revs[i]; r > index && r <= rev {
			fn(l.ats[i])
		}
	}
}

// Answered is told by a long poll of epoch that held index as it is released with an answer:
// every withdrawal published since index is in that answer, and the time since its verdict
// is observed.
func (r *Registry) Answered(epoch string, index int64) {
	// every long poll passes here: the common case (nothing withdrawn since index) is one
	// atomic load, before the epoch's and the revision's reads
	if r.metrics.propagation == nil || r.withdrawn.latest.Load() <= index || epoch != r.store.Epoch().ID {
		return
	}
	rev := r.revision()
	now := r.cfg.Now()
	r.withdrawn.since(index, rev, func(at time.Time) {
		r.metrics.propagation.Observe(max(now.Sub(at), 0).Seconds())
	})
}
