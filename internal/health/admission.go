package health

import (
	"slices"
	"sort"
	"time"
)

// ReasonAdmissionQueued goes with ADMITTING while an instance whose probes admit it waits
// for its cohort's admission budget (admit_rate a second), oldest first.
const ReasonAdmissionQueued = "ADMISSION_QUEUED"

// Admission sheds; withdrawal never waits (docs/reference/eligibility.md, "Admission sheds").
// At most AdmitRate instances with a probe class leave unknown per second per (capability,
// zone) — the first capability of the instance names its cohort — with a burst of as many;
// the rest wait, oldest registration first, and say ADMISSION_QUEUED. Withdrawals take no part
// in it: they take effect on their evidence at once, whatever is queued.

// admitQueue is one cohort's admission budget and the instances waiting for it.
type admitQueue struct {
	tokens  float64
	at      time.Time // of the last refill
	waiting []queued  // by registration, oldest first
}

// queued is an instance incarnation waiting for admission.
type queued struct {
	in  *instance
	seq uint64
}

// holds reports whether q still names a waiting incarnation.
func (q queued) holds() bool {
	return !q.in.gone && q.in.present && q.in.seq == q.seq && q.in.admitQueued && !q.in.admitted && !q.in.draining
}

// refill adds the tokens earned since the last refill, up to a burst of rate.
func (q *admitQueue) refill(now time.Time, rate float64) {
	if q.at.IsZero() {
		q.tokens, q.at = rate, now
		return
	}
	if d := now.Sub(q.at); d > 0 {
		q.tokens = min(rate, q.tokens+rate*d.Seconds())
		q.at = now
	}
}

// admitKey names the cohort whose budget admits in.
func admitKey(in *instance) cohortKey {
	if len(in.Capabilities) == 0 {
		return cohortKey{"", in.Zone}
	}
	return cohortKey{in.Capabilities[0], in.Zone}
}

// admit lets in into rotation at now if its cohort's budget allows, or queues it.
func (e *Engine) admit(in *instance, now time.Time) {
	if !in.Probe {
		in.admitted, in.rotationSince = true, now.UnixNano()
		e.withdrawnByOperator(in, now)
		return
	}
	if e.admitQ == nil {
		e.admitQ = map[cohortKey]*admitQueue{}
	}
	k := admitKey(in)
	q := e.admitQ[k]
	if q == nil {
		q = &admitQueue{}
		e.admitQ[k] = q
	}
	q.refill(now, e.cfg.AdmitRate)
	if !q.busy() && q.tokens >= 1 {
		q.tokens--
		e.enter(in, now)
		return
	}
	if !in.admitQueued {
		in.admitQueued = true
		// oldest registration first: a probe that admits later does not jump the queue (the
		// usual case appends: later registrations come later)
		at := in.registeredAt
		i := sort.Search(len(q.waiting), func(i int) bool { return q.waiting[i].in.registeredAt > at })
		q.waiting = slices.Insert(q.waiting, i, queued{in, in.seq})
	}
}

// busy reports whether instances still wait (stale entries dropped).
func (q *admitQueue) busy() bool {
	for len(q.waiting) > 0 && !q.waiting[0].holds() {
		q.waiting = q.waiting[1:]
	}
	return len(q.waiting) > 0
}

// enter puts in into rotation at now.
func (e *Engine) enter(in *instance, now time.Time) {
	in.admitQueued, in.admitted, in.rotationSince = false, true, now.UnixNano()
	e.withdrawnByOperator(in, now)
}

// admitQueued admits, at a Tick, the waiting instances the budgets allow, oldest first; the
// monitor judges them again (TakeAdmitted).
func (e *Engine) admitQueued(now time.Time) {
	for k, q := range e.admitQ {
		q.refill(now, e.cfg.AdmitRate)
		for q.busy() && q.tokens >= 1 {
			in := q.waiting[0].in
			q.waiting = q.waiting[1:]
			q.tokens--
			e.enter(in, now)
			e.admittedIDs = append(e.admittedIDs, in.ID)
		}
		if !q.busy() && q.tokens >= e.cfg.AdmitRate {
			delete(e.admitQ, k) // nothing waits and the budget is whole: nothing to keep
		}
	}
}

// TakeAdmitted returns the instances admitted from the queues since the last call.
func (e *Engine) TakeAdmitted() []string {
	out := e.admittedIDs
	e.admittedIDs = nil
	return out
}

// AdmissionsQueued returns how many instances wait for admission now.
func (e *Engine) AdmissionsQueued() int {
	n := 0
	for _, q := range e.admitQ {
		for _, w := range q.waiting {
			if w.holds() {
				n++
			}
		}
	}
	return n
}

// admissionsQueued is AdmissionsQueued under the monitor's lock (a scrape).
func (m *Monitor) admissionsQueued() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.engine.AdmissionsQueued()
}
