package health

// What replicas over a shared store share (see Monitor.SetFollowing): the elected replica
// judges and publishes its verdicts (Judged, TakeChanged) and its ramp clock (TakeRampMoved);
// the others follow them (Follow, SetRampClock), and derive what need not be published: an
// incarnation's first verdict, and the serving its slow start ends in.

import (
	"slices"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// First is the published verdict on an incarnation the monitor does not hold yet (registered
// a moment ago, through another replica or before this one's monitor heard of it): its first
// verdict, derived from the registration — admitting (out of rotation) with a probe class,
// else a slow start weighed at the ramp clock. It is what the monitor publishes once it holds
// the incarnation on a replica that follows, so that an answer does not change when it does.
// service is the incarnation's service, whose slot of the ramp clock weighs it.
func (r Reader) First(service string, probe bool, registeredAt time.Time) (state string, weight int) {
	v := r.m.followedVerdict(firstVerdict("", 0, probe, registeredAt), rampPhase(service), registeredAt)
	return v.State, v.Weight
}

// Followed is the verdict another replica (the elected one, which probes) published on one
// incarnation.
type Followed struct {
	ID         string
	Generation int64
	State      string
	// Weight is the published weight; 0 during a slow start, weighed from Since at the
	// elected replica's ramp clock (SetRampClock).
	Weight  int
	Since   time.Time
	Reasons []string
}

// followedOf returns, on a replica that follows, what v's verdict follows: the elected
// replica's verdict on v's incarnation or, while it has published none, the first verdict
// (derived true). ok is false on the elected replica, or a monitor alone.
func (m *Monitor) followedOf(v *view) (f Followed, derived, ok bool) {
	switch {
	case !m.following:
		return Followed{}, false, false
	case v.followed != nil && v.followed.Generation == v.generation:
		return *v.followed, false, true
	case v.in == nil:
		return Followed{}, false, false
	}
	return firstVerdict(v.in.ID, v.generation, v.in.Probe, instant(v.in.registeredAt)), true, true
}

// firstVerdict is an incarnation's first verdict, which every replica derives from its
// registration alone: admitting while a probe class has not admitted it, else a slow start
// from the registration (weighed at the ramp clock, and ending at it). The elected replica
// publishes a verdict only once followers do not answer it from this one (Judgment.Derived):
// a registration then costs a shared store no verdict write.
func firstVerdict(id string, gen int64, probe bool, registeredAt time.Time) Followed {
	if probe {
		return Followed{ID: id, Generation: gen, State: apiv1.EligibilityUnknown, Since: registeredAt, Reasons: reasonsAdmitting}
	}
	return Followed{ID: id, Generation: gen, State: apiv1.EligibilitySlowStart, Since: registeredAt, Reasons: reasonsSlowStart}
}

// FirstState is the state of an incarnation's first verdict: unknown (admitting) with a probe
// class, else slow start. Every replica derives it from the registration alone.
func FirstState(probe bool) string { return firstVerdict("", 0, probe, time.Time{}).State }

// followedVerdict is f at now: a slow start's weight at the elected replica's ramp clock, at
// the slot of phase (the ramp slot of f's service, see rampClockOf).
func (m *Monitor) followedVerdict(f Followed, phase uint8, now time.Time) Verdict {
	v := Verdict{State: f.State, Reasons: f.Reasons}
	clock := m.rampClockOf(phase)
	switch f.State {
	case apiv1.EligibilityServing:
		v.Weight = 100
	case apiv1.EligibilityDegraded:
		v.Weight = m.cfg.Engine.DegradedWeight
	case apiv1.EligibilitySlowStart:
		switch {
		case f.Weight == 0 && clock.Sub(f.Since) < m.cfg.Engine.SlowStart:
			// The tenth the ramp is in at the elected replica's ramp clock: every replica
			// answers the same weight at one revision.
			v.Weight = rampStep(clock.Sub(f.Since), m.cfg.Engine.SlowStart)
		case f.Weight != 0 && now.Sub(f.Since) < m.cfg.Engine.SlowStart:
			v.Weight = f.Weight // a step an earlier version published, on this replica's clock
		default:
			// The ramp ended: at the elected replica's ramp clock, which it publishes at the
			// sweep that judged the instance serving (no verdict says so: Judgment.Follows),
			// or for an earlier version's step, on this replica's clock.
			v = Verdict{State: apiv1.EligibilityServing, Weight: 100, Reasons: []string{}}
		}
	}
	if v.Reasons == nil {
		v.Reasons = []string{}
	}
	return v
}

// rampStep is the weight a slow start elapsed into (of slowStart, never 0: the engine's
// Config defaults it) has, to the tenth: 10 to 90 (past the ramp's end the verdict is
// serving, see followedVerdict). Before it began (no ramp clock yet, or one behind it), 10.
func rampStep(elapsed, slowStart time.Duration) int {
	if elapsed <= 0 {
		return 10
	}
	w := 90
	if elapsed < slowStart {
		w = 10 + int(90*elapsed/slowStart)
	}
	return max(10, min(90, weightStep(w)*10))
}

// SetRampClock takes the elected replica's ramp clock: the instant at which every replica
// weighs the slow starts the elected replica published (with weight 0), each service's at its
// slot of it (rampClockOf). The elected replica publishes its clock when one of its slow
// starts moves or ends (TakeRampMoved): one write for the whole fleet, where each instance's
// tenth used to be one. A follower weighs again at once the slow starts (published or
// derived) still ramping at its previous clock whose slot the clock passed: a ramp that
// ended stays ended, and a clock costs the ramps in progress of the slots it passed, not the
// fleet.
//
// It returns the instances whose answer moved with the clock, for the store to tell at the
// clock's revision (its long polls and delta watches hear those, not the whole fleet): on a
// follower those it weighed again, on the elected replica those whose slow start its own
// engine weighed again, or ended, since the last clock.
func (m *Monitor) SetRampClock(t, now time.Time) (moved []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.following {
		m.rampClock = t
		moved = make([]string, 0, len(m.rampTouched))
		for id := range m.rampTouched {
			moved = append(moved, id)
		}
		m.rampTouched = nil
		return moved
	}
	if t.Equal(m.rampClock) {
		return nil
	}
	var passed [rampSlots]bool
	for p := range passed {
		passed[p] = !m.rampClockOf(uint8(p)).Equal(rampClockOf(m.due.width, t, uint8(p)))
	}
	m.rampClock = t
	changed := false
	for v := range m.ramping { // refreshVerdict drops those whose ramp ends
		if !passed[v.phase] {
			continue
		}
		if m.refreshVerdict(v, now) {
			changed = true
			if v.in != nil {
				moved = append(moved, v.in.ID)
			}
		}
	}
	m.publish(changed)
	return moved
}

// TakeRampMoved reports whether the weight of one of this replica's slow starts moved, or one
// ended, since the last call: the elected replica then publishes its ramp clock, at (which
// moves its own answers' revision, and the followers' ramps when it passes a tenth). at is the
// latest instant a sweep or an Advance weighed the views due at (with unslotted ramps, the
// latest instant the monitor judged a verdict at): every slot up to it was weighed, so a
// follower ends a ramp at the clock no earlier than the elected replica did, and no later.
func (m *Monitor) TakeRampMoved() (at time.Time, moved bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	moved = m.rampMoved
	m.rampMoved = false
	if m.due.width == 0 || m.tickedAt.IsZero() {
		return m.judgedAt, moved
	}
	// A ramp that evidence moved, or ended, between two slots of its service is weighed by a
	// follower at the next slot the clock passes: once a step has passed since the last move,
	// one more clock is published, so that every slot has passed it (without it, a fleet whose
	// last ramp ended so would leave it unended on the followers until another ramp moved).
	if c := m.rampCover; c != 0 && m.tickedAt.UnixNano() >= c {
		moved, m.rampCover = true, 0
	}
	return m.tickedAt, moved
}

// SetFollowing says whether another replica judges (true on the replicas that are not
// elected, with a store that shares verdicts); the next Sync republishes accordingly.
func (m *Monitor) SetFollowing(following bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.following == following {
		return
	}
	m.following = following
	m.allDue = true // every verdict is due again: its source changed
	if !following {
		clear(m.ramping) // the engine weighs its own slow starts
	}
	for id, v := range m.views {
		if f := v.followed; !following && f != nil && f.Generation == v.generation {
			// Elected: take over what the previous elected replica judged, rather than
			// re-admitting every instance from unknown (its probes ran there, not here).
			m.engine.Adopt(id, f.State, f.Since)
		}
	}
}

// Follow records the verdict the elected replica published on an incarnation; while this
// replica follows, it is the published verdict.
func (m *Monitor) Follow(f Followed, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.views[f.ID]
	if !ok || v.generation != f.Generation {
		return
	}
	v.followed = &f
	if m.following {
		m.publish(m.refresh(f.ID, now))
	}
}

// TakeChanged returns the instances whose state this replica's engine changed since the
// last call (the elected replica publishes those), and starts a new set.
func (m *Monitor) TakeChanged() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changedIDs == nil {
		m.changedIDs = map[string]struct{}{} // from now on changes are kept for the next call
	}
	out := make([]string, 0, len(m.changedIDs))
	for id := range m.changedIDs {
		out = append(out, id)
	}
	clear(m.changedIDs)
	return out
}

// Judgment is this replica's own verdict on one incarnation, as the elected replica
// publishes it. During slow start Weight is 0 and Since is when the ramp began: every replica
// weighs it at the elected replica's ramp clock (see SetRampClock), so a ramp is published
// once, not at each tenth.
type Judgment struct {
	Generation int64
	State      string
	Weight     int
	Since      time.Time
	Reasons    []string
	// Derived says a follower answers this verdict from the registration alone (the
	// incarnation's first verdict, or the serving its slow start ends in, at the ramp
	// clock): while the store holds no verdict on the incarnation, it need not be published.
	Derived bool
	// rampSince is when the incarnation (re-)entered rotation: a slow start from then ends
	// in this serving verdict.
	rampSince time.Time
}

// Follows reports whether a follower holding f (a published verdict on the same
// incarnation) answers j already: the same verdict, or a slow start published with weight 0
// that j, serving, ends — a follower ends it at the ramp clock. The elected replica writes j
// only when it does not.
func (j Judgment) Follows(f Followed) bool {
	if j.State == apiv1.EligibilityServing && len(j.Reasons) == 0 && f.State == apiv1.EligibilitySlowStart && f.Weight == 0 {
		return f.Since.Equal(j.rampSince)
	}
	return j.State == f.State && j.Weight == f.Weight && slices.Equal(j.Reasons, f.Reasons) &&
		(j.State != apiv1.EligibilitySlowStart || j.Since.Equal(f.Since))
}

// Judged returns this replica's own verdict on id (what the elected replica publishes); ok
// is false when the monitor does not hold id, or follows.
func (m *Monitor) Judged(id string) (j Judgment, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.views[id]
	if !ok || m.following {
		return Judgment{}, false
	}
	j = Judgment{Generation: v.generation, State: v.state, Since: instant(v.since), Reasons: v.reasons}
	if v.state != apiv1.EligibilitySlowStart {
		j.Weight = int(v.weight)
	}
	if v.in != nil {
		if v.in.admitted {
			j.rampSince = time.Unix(0, v.in.rotationSince).UTC()
		}
		if v.state == apiv1.EligibilitySlowStart {
			j.Since = j.rampSince
		}
		j.Derived = j.Follows(firstVerdict(id, v.generation, v.in.Probe, instant(v.in.registeredAt)))
	}
	return j, true
}

// publishedVerdict is what of a verdict the elected replica publishes again when it changes.
type publishedVerdict struct {
	state string
	step  int // the tenth of the weight range the weight is in; 0 during slow start
}

// published is what of v the elected replica publishes again when it changes: the state, and
// outside slow start the tenth its weight is in (a degraded weight follows a slow start's
// ramp while that is lower).
func published(v Verdict) publishedVerdict {
	if v.State == apiv1.EligibilitySlowStart {
		return publishedVerdict{state: v.State}
	}
	return publishedVerdict{state: v.State, step: weightStep(v.Weight)}
}

// weightStep is the tenth of the weight range a weight is in.
func weightStep(w int) int { return w / 10 }
