package health

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// GroupAnswer is what discovery returns for one (capability, zone).
type GroupAnswer struct {
	// Panic is set when fewer than panic_threshold of the group's non-draining instances
	// are in rotation: then every one of them is returned.
	Panic     bool
	Instances []string // sorted ids
}

// Group answers for (capability, zone) at now. An incarnation never admitted (unknown with
// ADMITTING) is not a member: a surge of new, unprobed instances neither pushes the group
// into panic nor takes a full share in one — unless no member was ever admitted (a
// brand-new service), when the panic answer is every one of them.
func (e *Engine) Group(capability, zone string, now time.Time) GroupAnswer {
	var members, inRotation, admitting []string
	for id, in := range e.instances {
		if in.Zone != zone || !slices.Contains(in.Capabilities, capability) {
			continue
		}
		v := e.Verdict(id, now)
		switch {
		case v.State == apiv1.EligibilityAbsent || v.State == apiv1.EligibilityDraining || isEvacuated(v.State) || RefusedBeforeAdmission(v.State, v.Reasons) ||
			Forced(v.State, v.Reasons):
			continue // evacuated instances are no members while the evacuation holds, nor forced out ones
		case NeverAdmitted(v.State, v.Reasons):
			if len(e.evacuations) == 0 || !e.holding(in, now) {
				admitting = append(admitting, id) // an evacuated zone's are not even a new group's panic answer
			}
			continue
		}
		members = append(members, id)
		if v.InRotation() {
			inRotation = append(inRotation, id)
		}
	}
	sort.Strings(members)
	sort.Strings(inRotation)
	if len(members) == 0 && len(admitting) > 0 {
		sort.Strings(admitting)
		return GroupAnswer{Panic: true, Instances: admitting}
	}
	if len(members) > 0 && float64(len(inRotation)) < e.cfg.PanicThreshold*float64(len(members)) {
		return GroupAnswer{Panic: true, Instances: members}
	}
	if inRotation == nil {
		inRotation = []string{}
	}
	return GroupAnswer{Instances: inRotation}
}

// NeverAdmitted reports whether a verdict is that of an incarnation never admitted (its
// reasons hold ADMITTING): unknown while it waits for the probes that admit it, withdrawn
// when they were refused (RefusedBeforeAdmission).
func NeverAdmitted(state string, reasons []string) bool {
	return (state == apiv1.EligibilityUnknown || state == apiv1.EligibilityWithdrawn) && slices.Contains(reasons, ReasonAdmitting)
}

// RefusedBeforeAdmission reports whether a verdict is that of an incarnation never admitted
// whose probes were refused: nothing listens where it says it does. Discovery leaves it out
// of every answer, as if it were gone (and lists it as removed while the registry warms
// up, so that views merged from what they knew drop it); a group does not count it.
func RefusedBeforeAdmission(state string, reasons []string) bool {
	return state == apiv1.EligibilityWithdrawn && NeverAdmitted(state, reasons)
}

// group counts the instances of one (capability, zone), kept up to date as verdicts change
// so that the panic rule costs the same at any fleet size.
type group struct {
	key        groupKey
	refs       int // instances held that belong to it
	members    int // of those, neither absent nor draining nor never admitted
	inRotation int
	admitting  int  // never admitted (unknown with ADMITTING): not members (Engine.Group)
	dirty      bool // in Monitor.dirty
	// sample is its capability's entry of Monitor.sampleBuf, once a sample found it: a
	// capability keeps its entry while it has a group.
	sample *capSample
}

// countedAdmitting is the state a group counts a never-admitted incarnation in: unknown with
// ADMITTING (never published, only counted).
const countedAdmitting = "unknown/admitting"

// countAs is the state a verdict is counted in by its groups.
func countAs(state string, reasons []string) string {
	switch {
	case RefusedBeforeAdmission(state, reasons):
		return apiv1.EligibilityAbsent // as good as gone: discovery answers it nowhere
	case NeverAdmitted(state, reasons):
		return countedAdmitting
	case Forced(state, reasons):
		return countedForced
	}
	return state
}

// countedForced is the state a group counts an instance an operator forced out in: no member.
const countedForced = "withdrawn/forced"

// tally returns what a counted state adds to a group's counters.
func tally(state string) (member, inRotation, admitting int) {
	switch {
	case state == apiv1.EligibilityAbsent || state == apiv1.EligibilityDraining || isEvacuated(state) || state == "" || state == countedForced:
		return 0, 0, 0
	case state == countedAdmitting:
		return 0, 0, 1
	case apiv1.InRotation(state):
		return 1, 1, 0
	default:
		return 1, 0, 0
	}
}

// release drops v's references to its groups; a group nobody belongs to goes.
func (m *Monitor) release(v *view) {
	for _, g := range v.groups {
		if g.refs--; g.refs == 0 {
			delete(m.groups, g.key)
			delete(m.panics, g.key)
			delete(m.panicAll, g.key)
			delete(m.panicSince, g.key)
		}
	}
}

// ungroup takes v out of its groups' counters (they count it as absent from now on).
func (m *Monitor) ungroup(v *view) {
	m.recount(v, apiv1.EligibilityAbsent)
}

// recount moves v's contribution to its groups' counters to state and reports whether
// that changed anything.
func (m *Monitor) recount(v *view, state string) bool {
	if v.counted() == state {
		return false
	}
	om, or, oa := tally(v.counted())
	nm, nr, na := tally(state)
	for _, g := range v.groups {
		g.members += nm - om
		g.inRotation += nr - or
		g.admitting += na - oa
		if !g.dirty { // a burst (an evacuation) moves the same groups again and again
			g.dirty = true
			m.dirty[g.key] = struct{}{}
		}
	}
	// Its verdict is state from here on (refreshVerdict), unless state is absent.
	v.ungrouped = state == apiv1.EligibilityAbsent
	return true
}

// panic recomputes the panic flag of k and reports whether it changed.
func (m *Monitor) panic(k groupKey, now time.Time) bool {
	g := m.groups[k]
	if g == nil {
		return false
	}
	members, inRotation := g.members, g.inRotation
	// Never-admitted incarnations are no members (Engine.Group): in panic only when no member
	// was ever admitted, and then the answer is all of them.
	everyOne := members == 0 && g.admitting > 0
	p := everyOne || members > 0 && float64(inRotation) < m.cfg.Engine.PanicThreshold*float64(members)
	if m.panics[k] == p && m.panicAll[k] == everyOne {
		return false
	}
	m.touchedAll = m.onPublish != nil // every entry of the group is answered anew, in any service
	if everyOne {
		m.panicAll[k] = true
	} else {
		delete(m.panicAll, k)
	}
	if m.panics[k] == p {
		return true
	}
	if p {
		m.panics[k] = true
		m.panicSince[k] = now
		level, msg := slog.LevelWarn, "panic: discovery returns every instance of the group"
		if everyOne { // a new service's instances waiting for their first probes: the start, not an outage
			level, msg = slog.LevelInfo, "no instance of the group admitted yet: discovery returns all of them until their probes admit them"
		}
		m.cfg.Logger.LogAttrs(context.Background(), level, msg,
			slog.String("capability_id", k.capability), slog.String("zone", k.zone),
			slog.Int("in_rotation", inRotation), slog.Int("instances", members+g.admitting), slog.Int("never_admitted", g.admitting))
	} else {
		delete(m.panics, k)
		delete(m.panicSince, k)
		m.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "panic over", slog.String("capability_id", k.capability), slog.String("zone", k.zone))
	}
	if m.cfg.OnTransition != nil {
		to := TransitionPanicOver
		if p {
			to = TransitionPanic
		}
		m.cfg.OnTransition(Transition{At: now.UTC(), To: to, Reasons: []string{k.capability, k.zone}})
	}
	return true
}

// sustained tells OnTransition about groups in panic for PanicIncidentAfter.
func (m *Monitor) sustained(now time.Time) {
	for k, since := range m.panicSince {
		if now.Sub(since) < m.cfg.PanicIncidentAfter {
			continue
		}
		delete(m.panicSince, k)
		if m.cfg.OnTransition != nil {
			m.cfg.OnTransition(Transition{At: now.UTC(), To: TransitionPanicSustained, Reasons: []string{k.capability, k.zone}})
		}
	}
}

// Panic is Monitor.Panic under the held lock.
func (r Reader) Panic(capability, zone string) bool { return r.m.panics[groupKey{capability, zone}] }

// PanicTakesAll reports whether the panic answer of (capability, zone) includes its
// never-admitted incarnations: no member of it was ever admitted (a brand-new service).
// Otherwise they are left out of the panic answer.
func (r Reader) PanicTakesAll(capability, zone string) bool {
	return r.m.panicAll[groupKey{capability, zone}]
}

// NeverAdmitted reports whether the incarnation gen of id (through h when given) has the
// verdict of one never admitted; an incarnation the monitor does not hold yet has its first
// verdict, derived from whether it is probed.
func (r Reader) NeverAdmitted(h *Handle, id string, gen int64, probe bool, registeredAt time.Time) bool {
	if v := r.viewOf(h, id, gen); v != nil {
		return NeverAdmitted(v.state, v.reasons)
	}
	f := r.m.followedVerdict(firstVerdict("", 0, probe, registeredAt), 0, registeredAt) // its state: any slot
	return NeverAdmitted(f.State, f.Reasons)
}

// RefusedBeforeAdmission is health.RefusedBeforeAdmission of the incarnation, read as
// NeverAdmitted reads it.
func (r Reader) RefusedBeforeAdmission(h *Handle, id string, gen int64) bool {
	v := r.viewOf(h, id, gen)
	return v != nil && RefusedBeforeAdmission(v.state, v.reasons)
}

// Forced is health.Forced of the incarnation: an operator forced it out past
// OVERRIDE_UNSAFE, and no pool uses it, even in panic.
func (r Reader) Forced(h *Handle, id string, gen int64) bool {
	v := r.viewOf(h, id, gen)
	return v != nil && Forced(v.state, v.reasons)
}

// viewOf is the view of incarnation gen of id, through h when it still names it; nil when
// the monitor does not hold that incarnation.
func (r Reader) viewOf(h *Handle, id string, gen int64) *view {
	if h != nil && !h.v.gone && h.v.generation == h.generation {
		return h.v
	}
	if v, ok := r.m.views[id]; ok && v.generation == gen {
		return v
	}
	return nil
}

// Panic reports whether (capability, zone) is in panic: discovery then returns every
// non-draining instance of it at weight 100.
func (m *Monitor) Panic(capability, zone string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Reader{m}.Panic(capability, zone)
}
