package health

import (
	"fmt"
	"sort"
	"time"
)

// The cohort flap guard (docs/reference/eligibility.md, "A cohort flapping together"): when
// more than flap_cohort_share of a (capability, zone) cohort — and at least two of its
// instances — flap within one flap_window (each entered withdrawn twice or more), their
// withdrawals are one cohort event: a shared dependency wobbling, or a health check wrong for all of them, not N broken
// instances. None of those withdrawals counts towards its instance's quarantine (which would
// take capacity away exactly when it is short); the cohort event is said once, and ends when a
// flap_window passes with no member entering withdrawn.

// flapEntry is one entry of a cohort member into withdrawn.
type flapEntry struct {
	at time.Time
	in *instance
}

// cohortFlap is what the guard keeps of one cohort.
type cohortFlap struct {
	entries  []flapEntry // within the last flap_window, oldest first
	flapping bool        // the cohort event stands
}

// CohortChange is a cohort that started or stopped flapping together (TakeCohortChanges).
type CohortChange struct {
	At                time.Time
	Capability, Zone  string
	Flapping          bool
	Withdrawn, Cohort int // members that flapped within the window, and the cohort's size
}

// cohortFlapping records in's entry into withdrawn at now in each of its cohorts and reports
// whether one of them flaps together: then the entry does not count towards in's quarantine.
func (e *Engine) cohortFlapping(in *instance, now time.Time) bool {
	together := false
	for _, c := range in.Capabilities {
		k := cohortKey{c, in.Zone}
		if e.flaps == nil {
			e.flaps = map[cohortKey]*cohortFlap{}
		}
		f := e.flaps[k]
		if f == nil {
			f = &cohortFlap{}
			e.flaps[k] = f
		}
		f.prune(now, e.cfg.FlapWindow)
		f.entries = append(f.entries, flapEntry{at: now, in: in})
		// a member flaps when it entered withdrawn twice or more within the window: one
		// withdrawal each (a crash here, an ejection there) is no cohort flapping
		entries := map[*instance]int{}
		flapping := 0
		for _, en := range f.entries {
			if entries[en.in]++; entries[en.in] == 2 {
				flapping++
			}
		}
		size := len(e.cohorts[k])
		if flapping < 2 || float64(flapping) <= e.cfg.FlapCohortShare*float64(size) {
			continue
		}
		together = true
		if !f.flapping {
			f.flapping = true
			e.cohortChanges = append(e.cohortChanges, CohortChange{At: now, Capability: c, Zone: in.Zone, Flapping: true, Withdrawn: flapping, Cohort: size})
		}
	}
	return together
}

// forgetFlaps drops in's entries from its cohorts' flap records (an operator released it from
// quarantine: its flapping is handled, and counts towards no cohort event).
func (e *Engine) forgetFlaps(in *instance) {
	for _, c := range in.Capabilities {
		f := e.flaps[cohortKey{c, in.Zone}]
		if f == nil {
			continue
		}
		kept := f.entries[:0]
		for _, en := range f.entries {
			if en.in != in {
				kept = append(kept, en)
			}
		}
		f.entries = kept
	}
}

// prune drops the entries older than window at now.
func (f *cohortFlap) prune(now time.Time, window time.Duration) {
	i := 0
	for i < len(f.entries) && now.Sub(f.entries[i].at) >= window {
		i++
	}
	f.entries = f.entries[i:]
}

// endCohortFlaps ends, at a Tick, the cohort events with no entry within the last flap_window,
// and forgets the cohorts with nothing left to remember.
func (e *Engine) endCohortFlaps(now time.Time) {
	if len(e.flaps) == 0 {
		return
	}
	var ended []CohortChange
	for k, f := range e.flaps {
		f.prune(now, e.cfg.FlapWindow)
		if len(f.entries) > 0 {
			continue
		}
		if f.flapping {
			ended = append(ended, CohortChange{At: now, Capability: k.capability, Zone: k.zone, Cohort: len(e.cohorts[k])})
		}
		delete(e.flaps, k)
	}
	sort.Slice(ended, func(i, j int) bool {
		return ended[i].Capability < ended[j].Capability || ended[i].Capability == ended[j].Capability && ended[i].Zone < ended[j].Zone
	})
	e.cohortChanges = append(e.cohortChanges, ended...)
}

// TakeCohortChanges returns the cohort flap changes since the last call, oldest first.
func (e *Engine) TakeCohortChanges() []CohortChange {
	out := e.cohortChanges
	e.cohortChanges = nil
	return out
}

// Detail says a cohort change in a sentence.
func (c CohortChange) Detail(window time.Duration) string {
	if !c.Flapping {
		return fmt.Sprintf("the cohort %s in zone %s no longer flaps together: no member left rotation for %s", c.Capability, c.Zone, window)
	}
	return fmt.Sprintf("%d of the %d instances of %s in zone %s left rotation twice or more within %s: one cohort event (a shared dependency or a health check wrong for all of them), no quarantines",
		c.Withdrawn, c.Cohort, c.Capability, c.Zone, window)
}
