package health

import (
	"fmt"
	"slices"
	"sort"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Override actions.
const (
	ActionWithdraw = "withdraw"
	ActionRelease  = "release"
)

// override is an operator's withdrawal of one instance id: it holds across the
// re-registrations of the id until it ends.
type override struct {
	at, until time.Time
	by, why   string
	force     bool // kept out even in panic (ReasonOperatorForced)
}

// operatorCauses are the causes an operator's withdrawal gives.
var operatorCauses = []string{ReasonOperatorWithdrawn, ReasonOperatorForced}

// evacuation is an operator's evacuation of a zone (of one capability, or of all). While it
// holds (before until, not ended) the zone's instances are evacuated; from its end they
// return at the weights of ReturnSteps, one step a ReturnDwell, then serve.
type evacuation struct {
	id, zone, capability string
	at, until            time.Time
	ended                time.Time // when it was ended before until (zero: it holds until until)
	by, why              string
	// the way back: the step reached and since when (advanced lazily, returnSteps), and
	// whether it is held (its zone is a zone outlier)
	step      int
	stepSince time.Time
	held      bool
	heldCheck time.Time // while held, when the hold is judged again
}

// end is when the evacuation stops holding.
func (ev *evacuation) end() time.Time {
	if !ev.ended.IsZero() && ev.ended.Before(ev.until) {
		return ev.ended
	}
	return ev.until
}

// Evacuation is an evacuation as the engine holds it (Engine.Evacuations).
type Evacuation struct {
	ID, Zone, Capability string
	At, Until, Ended     time.Time
	By, Why              string
	// Holding says the zone's instances are evacuated; Returning that they are on the way
	// back, at Weight since StepSince (the weight of step Step of ReturnSteps).
	Holding, Returning, Held bool
	Step, Weight             int
	StepSince                time.Time
	// NextStep is when the return moves to its next step (or ends).
	NextStep time.Time
}

// override applies an override event: withdraw ev.ID until ev.Until, or release it (the
// withdrawal ends, and a quarantine with it: the instance enters slow start at once).
func (e *Engine) override(ev Event) error {
	switch ev.Action {
	case ActionWithdraw:
		if !ev.Until.After(ev.At) {
			return fmt.Errorf("override of %q: until %s is not after %s", ev.ID, ev.Until.Format(time.RFC3339), ev.At.Format(time.RFC3339))
		}
		e.overrides[ev.ID] = &override{at: ev.At, until: ev.Until, by: ev.By, why: ev.Why, force: ev.Force}
		if in := e.instances[ev.ID]; in != nil && in.present {
			e.advance(in, ev.At)
			for _, c := range operatorCauses { // a new withdrawal replaces the evidence of the old
				delete(in.causes, c)
			}
			e.withdrawnByOperator(in, ev.At)
		}
	case ActionRelease:
		delete(e.overrides, ev.ID)
		in := e.instances[ev.ID]
		if in == nil || !in.present {
			return nil
		}
		e.advance(in, ev.At)
		if _, ended := in.causes[ReasonQuarantineEnded]; in.quarantined(ev.At) || ended {
			if t := in.tr; t != nil && ev.At.Before(t.quarantineUntil) {
				t.quarantineUntil = ev.At
				t.okRun, t.badRun = 0, 0
				t.score = 0 // the operator judged its flapping handled: its past counts no more
			}
			e.forgetFlaps(in)
			e.clearCauses(in, ev.At, ReasonOperatorWithdrawn, ReasonOperatorForced, ReasonQuarantineEnded, ReasonProbeFailing, ReasonProbeScore, ReasonProbeRefused, ReasonSilentCorroborated)
			if len(in.causes) == 0 {
				in.rotationSince = ev.At.UnixNano() // released from quarantine: slow start from now
			}
			return nil
		}
		e.clearCauses(in, ev.At, operatorCauses...)
	default:
		return fmt.Errorf("override of %q: action %q: want withdraw or release", ev.ID, ev.Action)
	}
	return nil
}

// withdrawnByOperator gives an admitted instance the cause of an operator's withdrawal that
// holds on its id. It does not count towards flapping: the operator decided, the instance
// did not fail.
func (e *Engine) withdrawnByOperator(in *instance, now time.Time) {
	o := e.overrides[in.ID]
	if o == nil || !in.admitted || !now.Before(o.until) {
		return
	}
	if _, had := in.causes[ReasonOperatorWithdrawn]; had {
		return
	}
	if in.causes == nil {
		in.causes = map[string]Evidence{}
	}
	in.causes[ReasonOperatorWithdrawn] = Evidence{At: o.at, Detail: fmt.Sprintf("withdrawn by %s until %s: %s", who(o.by), o.until.UTC().Format(time.RFC3339), o.why)}
	if o.force {
		in.causes[ReasonOperatorForced] = Evidence{At: o.at, Detail: fmt.Sprintf("forced by %s past OVERRIDE_UNSAFE: no member of its pools, kept out even when they panic", who(o.by))}
	}
}

// Forced reports whether a verdict is that of an instance an operator forced out (past
// OVERRIDE_UNSAFE): no member of its groups, never answered in panic.
func Forced(state string, reasons []string) bool {
	return state == apiv1.EligibilityWithdrawn && slices.Contains(reasons, ReasonOperatorForced)
}

func who(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}

// overrideEnds ends the operator's withdrawal of in when it has run out by now.
func (e *Engine) overrideEnds(in *instance, now time.Time) {
	o := e.overrides[in.ID]
	if o == nil || now.Before(o.until) {
		return
	}
	delete(e.overrides, in.ID)
	e.clearCauses(in, o.until, operatorCauses...)
}

// evacuate applies an evacuate event (a new evacuation, or a new until for one that holds)
// or an evacuation_ended event (it ends now; its instances start their way back).
func (e *Engine) evacuate(ev Event) error {
	cur := e.evacuations[ev.Evacuation]
	if ev.Kind == KindEvacuationEnded {
		if cur == nil {
			return fmt.Errorf("evacuation_ended: no evacuation %q", ev.Evacuation)
		}
		if ev.At.Before(cur.end()) {
			cur.ended = ev.At
		}
		return nil
	}
	switch {
	case ev.Evacuation == "" || ev.Zone == "":
		return fmt.Errorf("evacuate: an evacuation needs an id and a zone")
	case !ev.Until.After(ev.At):
		return fmt.Errorf("evacuation %q: until %s is not after %s", ev.Evacuation, ev.Until.Format(time.RFC3339), ev.At.Format(time.RFC3339))
	case cur != nil && !ev.At.Before(cur.end()):
		return fmt.Errorf("evacuation %q has ended", ev.Evacuation)
	case cur != nil:
		cur.until = ev.Until // extended (or shortened)
		return nil
	}
	e.evacuations[ev.Evacuation] = &evacuation{id: ev.Evacuation, zone: ev.Zone, capability: ev.Capability, at: ev.At, until: ev.Until, by: ev.By, why: ev.Why}
	return nil
}

// returnSteps brings an ended evacuation's way back up to now: one step each ReturnDwell.
// A step is held while the zone is a zone outlier (returnHeld). It reports whether the way
// back is over.
func (e *Engine) returnSteps(ev *evacuation, now time.Time) bool {
	end := ev.end()
	if now.Before(end) {
		return false
	}
	if ev.stepSince.IsZero() {
		ev.step, ev.stepSince = 0, end
	}
	// Holds are judged on a fixed grid (each step's end, then every relativeEvery while
	// held), from the evidence as of each instant: the way back is a function of the
	// evidence and the clock, not of when it is looked at.
	for ev.step < len(e.cfg.ReturnSteps) {
		at := ev.stepSince.Add(e.cfg.ReturnDwell)
		if ev.held {
			at = ev.heldCheck
		}
		if now.Before(at) {
			break
		}
		switch {
		case e.returnHeld(ev, at):
			ev.held, ev.heldCheck = true, at.Add(relativeEvery) // the step waits
		case ev.held:
			ev.held, ev.stepSince = false, at // no outlier any more: the step's dwell starts again
		default:
			ev.step, ev.stepSince = ev.step+1, at
		}
	}
	return ev.step >= len(e.cfg.ReturnSteps)
}

// returnHeld reports whether a return step of ev must wait at instant at: while its zone is
// a zone outlier of the capability it evacuated (of any capability of the zone, for an
// evacuation of all of them).
func (e *Engine) returnHeld(ev *evacuation, at time.Time) bool {
	caps := []string{ev.capability}
	if ev.capability == "" {
		caps = nil
		for k := range e.cohorts {
			if k.zone == ev.zone && !slices.Contains(caps, k.capability) {
				caps = append(caps, k.capability)
			}
		}
	}
	for _, c := range caps {
		if slices.Contains(e.ZoneOutliers(c, at), ev.zone) {
			return true
		}
	}
	return false
}

// covers reports whether ev applies to in (its zone, and its capability when it names one).
func (ev *evacuation) covers(in *instance) bool {
	return in.Zone == ev.zone && (ev.capability == "" || slices.Contains(in.Capabilities, ev.capability))
}

// evacuated reports whether an evacuation that holds at now covers in, or else the weight
// of the return step of the lowest return that does (0 when none does). The evacuations
// whose way back is over are dropped.
func (e *Engine) evacuated(in *instance, now time.Time) (bool, int) {
	weight := 0
	for id, ev := range e.evacuations {
		if now.Before(ev.at) || !ev.covers(in) {
			if !now.Before(ev.end()) && e.returnSteps(ev, now) {
				delete(e.evacuations, id)
			}
			continue
		}
		if now.Before(ev.end()) {
			return true, 0
		}
		if e.returnSteps(ev, now) {
			delete(e.evacuations, id)
			continue
		}
		if w := e.cfg.ReturnSteps[ev.step]; weight == 0 || w < weight {
			weight = w
		}
	}
	return false, weight
}

// covered reports whether an evacuation holding or returning at now covers in.
func (e *Engine) covered(in *instance, now time.Time) bool {
	for _, ev := range e.evacuations {
		if !now.Before(ev.at) && ev.covers(in) && (now.Before(ev.end()) || !e.returnSteps(ev, now)) {
			return true
		}
	}
	return false
}

// returningRamp reports whether in is on the way back while its slow start still ramps:
// its weight then changes with time at every judgment.
func (e *Engine) returningRamp(in *instance, now time.Time) bool {
	if !in.admitted || len(in.causes) > 0 || in.draining || in.quarantined(now) || sinceNanos(now, in.rotationSince) >= e.cfg.SlowStart {
		return false
	}
	evacuated, w := e.evacuated(in, now)
	return !evacuated && w > 0
}

// operatorChanges considers the instants at which an operator's decision about in changes
// its verdict by itself: a withdrawal's end, an evacuation's end and the steps of its way
// back.
func (e *Engine) operatorChanges(in *instance, now time.Time, consider func(time.Time)) {
	if o := e.overrides[in.ID]; o != nil {
		consider(o.until)
	}
	for _, ev := range e.evacuations {
		if !ev.covers(in) {
			continue
		}
		consider(ev.at)
		end := ev.end()
		if now.Before(end) {
			consider(end)
			continue
		}
		if !e.returnSteps(ev, now) {
			if ev.held {
				consider(ev.heldCheck)
			} else {
				consider(ev.stepSince.Add(e.cfg.ReturnDwell))
			}
		}
	}
}

// evacuationEvidence is the evidence behind EVACUATED or RETURNING for in at now: the
// evacuation, who and why, and until when.
func (e *Engine) evacuationEvidence(in *instance, now time.Time, code string) Evidence {
	var best *evacuation
	for _, ev := range e.sortedEvacuations() {
		if !ev.covers(in) || now.Before(ev.at) {
			continue
		}
		holding := now.Before(ev.end())
		if (code == ReasonEvacuated) == holding {
			best = ev
			break
		}
	}
	if best == nil {
		return Evidence{}
	}
	scope := "every capability"
	if best.capability != "" {
		scope = best.capability
	}
	if code == ReasonEvacuated {
		return Evidence{At: best.at, Detail: fmt.Sprintf("evacuation %s of zone %s (%s) by %s until %s: %s", best.id, best.zone, scope, who(best.by),
			best.until.UTC().Format(time.RFC3339), best.why)}
	}
	e.returnSteps(best, now)
	return Evidence{At: best.stepSince, Detail: fmt.Sprintf("evacuation %s of zone %s (%s) ended at %s; return step %d of %v (weight %d) until %s",
		best.id, best.zone, scope, best.end().UTC().Format(time.RFC3339), best.step+1, e.cfg.ReturnSteps, e.cfg.ReturnSteps[min(best.step, len(e.cfg.ReturnSteps)-1)],
		best.stepSince.Add(e.cfg.ReturnDwell).UTC().Format(time.RFC3339))}
}

func (e *Engine) sortedEvacuations() []*evacuation {
	out := make([]*evacuation, 0, len(e.evacuations))
	for _, ev := range e.evacuations {
		out = append(out, ev)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Evacuations returns the evacuations that hold or whose instances are on their way back
// at now, by id.
func (e *Engine) Evacuations(now time.Time) []Evacuation {
	out := []Evacuation{}
	for _, ev := range e.sortedEvacuations() {
		x := Evacuation{ID: ev.id, Zone: ev.zone, Capability: ev.capability, At: ev.at, Until: ev.until, Ended: ev.ended, By: ev.by, Why: ev.why}
		switch {
		case now.Before(ev.end()):
			x.Holding = true
		case !e.returnSteps(ev, now):
			x.Returning, x.Held, x.Step, x.Weight, x.StepSince = true, ev.held, ev.step, e.cfg.ReturnSteps[ev.step], ev.stepSince
			x.NextStep = ev.stepSince.Add(e.cfg.ReturnDwell)
		default:
			continue
		}
		out = append(out, x)
	}
	return out
}

// isEvacuated reports whether a state takes an instance out of its groups (evacuated
// instances are not members while the evacuation holds).
func isEvacuated(state string) bool { return state == apiv1.EligibilityEvacuated }

// scope returns the zone and capability of evacuation id, as the engine holds it.
func (e *Engine) scope(id string) (zone, capability string, ok bool) {
	ev := e.evacuations[id]
	if ev == nil {
		return "", "", false
	}
	return ev.zone, ev.capability, true
}

// Operate applies an operator's decision (an override, evacuate or evacuation_ended event)
// and judges again the instances it concerns — one instance, or a zone's — publishing the
// change as one revision. The engine then moves them by itself (the end of a withdrawal, of
// an evacuation, each step of the way back) at the sweeps.
func (m *Monitor) Operate(ev Event) error {
	_, err := m.OperateCount(ev)
	return err
}

// OperateCount is Operate; it also returns how many instances the decision concerns (those
// of the evacuated zone and scope, or the one overridden).
func (m *Monitor) OperateCount(ev Event) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.engine.Apply(ev); err != nil {
		return 0, err
	}
	n := 0
	changed := false
	groups := map[groupKey]struct{}{}
	judge := func(v *view) {
		if v.state != apiv1.EligibilityDraining && v.state != apiv1.EligibilityAbsent {
			n++
		}
		if m.refreshVerdict(v, ev.At) {
			changed = true
			for _, g := range v.groups {
				groups[g.key] = struct{}{}
			}
		}
	}
	switch ev.Kind {
	case KindOverride:
		if v := m.views[ev.ID]; v != nil && v.in != nil {
			judge(v)
		}
	default:
		zone, capability, ok := m.engine.scope(ev.Evacuation)
		if !ok {
			return 0, nil
		}
		scope := evacuation{zone: zone, capability: capability}
		for _, v := range m.views {
			if v.in != nil && scope.covers(v.in) {
				judge(v)
			}
		}
	}
	for k := range groups {
		changed = m.panic(k, ev.At) || changed
	}
	m.publish(changed)
	return n, nil
}

// Groups calls fn with the counts of every (capability, zone) group: its members (neither
// draining, nor evacuated, nor never admitted) and those of them in rotation. It costs the
// groups, not the fleet.
func (r Reader) Groups(fn func(capability, zone string, members, inRotation int)) {
	for k, g := range r.m.groups {
		fn(k.capability, k.zone, g.members, g.inRotation)
	}
}

// Evacuations returns the evacuations that hold or are on the way back at now.
func (m *Monitor) Evacuations(now time.Time) []Evacuation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engine.Evacuations(now)
}

// Settings returns the engine's settings, defaults filled in.
func (m *Monitor) Settings() Config { return m.cfg.Engine.WithDefaults() }

// reasonsAdmittingEvacuated are the reasons of a never-admitted incarnation in a zone that
// is evacuated, as published.
var reasonsAdmittingEvacuated = []string{ReasonAdmitting, ReasonEvacuated}

// published is the verdict the monitor publishes for in, given the engine's: an incarnation
// never admitted (unknown) in a zone an evacuation holds is published evacuated. The
// engine's precedence keeps it unknown; published so, a brand-new group's panic — whose
// answer is every never-admitted member — would send the evacuated zone traffic, as it did
// to a zone whose instances had just registered (meshflows dev, right after its start).
func (e *Engine) published(in *instance, v Verdict, now time.Time) Verdict {
	if v.State != apiv1.EligibilityUnknown || len(e.evacuations) == 0 || in == nil {
		return v
	}
	if evacuated, _ := e.evacuated(in, now); evacuated {
		return Verdict{State: apiv1.EligibilityEvacuated, Reasons: reasonsAdmittingEvacuated}
	}
	return v
}

// holding reports whether an evacuation that holds at now covers in.
func (e *Engine) holding(in *instance, now time.Time) bool {
	evacuated, _ := e.evacuated(in, now)
	return evacuated
}
