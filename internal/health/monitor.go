package health

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// DefaultHistory is how many transitions the monitor keeps per instance.
const DefaultHistory = 20

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Engine holds the docs/reference/eligibility.md settings (defaults filled in).
	Engine Config
	// History is how many transitions are kept per instance (default 20).
	History int
	// Logger receives transitions and self-preservation changes; nil is silent.
	Logger *slog.Logger
	// Registerer receives the eligibility metrics; nil registers none.
	Registerer prometheus.Registerer
	// OnTransition, when set, is called (under the monitor's lock: it must not call back)
	// for every change of an instance's state, of a group's panic (TransitionPanic…; Reasons
	// hold the capability and zone) and of self-preservation (TransitionSelfPreservation…):
	// incidents are raised from it.
	OnTransition func(Transition)
	// TimelineBucket is the width of one slice of the 24-hour health timeline (default 5 min).
	TimelineBucket time.Duration
	// PanicIncidentAfter is how long a group stays in panic before OnTransition hears
	// TransitionPanicSustained (default 1 min): a registry that starts, or a fleet that restarts,
	// has its probe-class instances `unknown` for a couple of probe intervals, and that panic
	// is expected, not an incident.
	PanicIncidentAfter time.Duration
	// RampStep is how often a weight in slow start is weighed again (default 1 s: the
	// registry's sweep interval). Each service has a slot, one of RampSlots of the step: the
	// ramps of its instances are weighed at that slot, so that a fleet's ramps move a slot of
	// services at each slot of the step (Advance), not every service at once — each such
	// move answers the long polls of the services it changes. Negative: weighed at every
	// sweep, all at once (and so on a replica that shares verdicts with others).
	RampStep time.Duration
}

// Registry-wide and group transitions OnTransition hears, besides instance states.
const (
	TransitionPanic          = "panic"           // a (capability, zone) entered panic
	TransitionPanicSustained = "panic_sustained" // and stayed in it for PanicIncidentAfter
	TransitionPanicOver      = "panic_over"      // it left panic
	// TransitionOutcomeDisputed: an outcome was ignored because other reporters saw the
	// instance healthy (Reasons: the reporter, the detail).
	TransitionOutcomeDisputed  = "outcome_disputed"
	TransitionSelfPreservation = "self_preservation" // lease expiry stopped evicting
	// TransitionZoneOutlier: a zone of a capability fails as a whole against its other zones
	// (Reasons: the capability, the zone, the figures); TransitionZoneOutlierOver: no longer.
	TransitionZoneOutlier          = "zone_outlier"
	TransitionZoneOutlierOver      = "zone_outlier_over"
	TransitionSelfPreservationOver = "self_preservation_over"
	// TransitionCohortFlapping: more than flap_cohort_share of a (capability, zone) cohort
	// left rotation within one flap_window — one cohort event, no quarantines (Reasons: the
	// capability, the zone, the figures); TransitionCohortFlappingOver: a flap_window passed
	// with no member leaving.
	TransitionCohortFlapping     = "cohort_flapping"
	TransitionCohortFlappingOver = "cohort_flapping_over"
)

// Transition is one change of an instance's state (the wire type).
type Transition = apiv1.Transition

// Fleet is what the registry holds, for Sync: Member(i) needs only the ID of its
// Instance; Instance(i) is asked only for incarnations the monitor does not hold yet.
type Fleet interface {
	Len() int
	Member(i int) Member
	Instance(i int) Instance
}

// Members is a Fleet in a slice.
type Members []Member

// Len implements Fleet.
func (ms Members) Len() int { return len(ms) }

// Member implements Fleet.
func (ms Members) Member(i int) Member { return ms[i] }

// Instance implements Fleet.
func (ms Members) Instance(i int) Instance { return ms[i].Instance }

// Member is what the registry holds about one instance, for Sync.
type Member struct {
	Instance
	Generation   int64
	RegisteredAt time.Time
	LastRenewal  time.Time
	Health       string
}

// Explanation is the answer of GET /v1/services/{id}/eligibility (the wire type).
type Explanation = apiv1.Explanation

type groupKey struct{ capability, zone string }

// view is the monitor's record of one instance. A million of them are held at once, so the
// instants it keeps are Unix nanoseconds (8 bytes, not a time.Time's 24) and its flags sit
// together: 192 bytes, a multiple of a cache line, where time.Times would make it 288.
//
// Its first 64 bytes (one cache line: the allocator puts 192-byte objects at multiples of
// 192) hold all that a sweep reads and writes of a view whose weight ramps in slow start:
// after a registry restart a sweep weighs a million of them, and reading each view's second
// line, and its engine record, was most of a sweep's 235 ms.
type view struct {
	// nextDue is when its verdict may next change without new evidence (Unix nanoseconds):
	// dueNow to judge it at once, dueNever when nothing is due.
	nextDue  int64
	queuedAt int64 // Unix nanoseconds
	// rampFrom and rampUntil say, when the engine last judged it, that it was ramping from
	// rampFrom and that until rampUntil nothing but its weight can change without new
	// evidence: a sweep weighs it again from these alone, up to rampCap (see reweigh).
	// Evidence that can change its verdict zeroes rampUntil (apply).
	rampFrom  int64
	rampUntil int64
	in        *instance // the engine's record of it, from its registration on (its ID is the view's)
	followed  *Followed // the elected replica's verdict, when another replica judges
	weight    int32     // its verdict's weight
	rampCap   int16
	phase     uint8 // its service's ramp slot (Monitor.nextSlot)
	queued    bool  // the monitor's due queue holds an entry for it, at queuedAt
	gone      bool  // forgotten: handles to it answer nothing
	// ungrouped says that its groups' counters hold it as absent; otherwise they hold it in
	// its verdict's state (recount keeps the two in step).
	ungrouped bool
	// fresh: its incarnation has had no verdict yet. Until it has, discovery answers the
	// first verdict derived from the record (Reader.First): its first verdict, when it is
	// that one, changes no answer (touch is not told).
	fresh bool
	// synced is the last Sync that found it in the fleet (the low bits of Monitor.syncs: a
	// view that misses one Sync is forgotten at it, so the count wrapping is harmless).
	synced uint32

	state       string   // its verdict's state (verdict returns the whole verdict)
	reasons     []string // its verdict's reasons
	generation  int64
	lastRenewal int64    // Unix nanoseconds
	groups      []*group // the groups it belongs to
	since       int64    // when the verdict's state began, Unix nanoseconds: a time.Time is three times the size
	history     []change
	health      string // the last self-report applied
}

// verdict returns v's published verdict.
func (v *view) verdict() Verdict {
	return Verdict{State: v.state, Weight: int(v.weight), Reasons: v.reasons}
}

// counted is the state its groups' counters hold it in (countAs).
func (v *view) counted() string {
	if v.ungrouped {
		return apiv1.EligibilityAbsent
	}
	return countAs(v.state, v.reasons)
}

// change is one transition of a view's history, in less room than a Transition: the
// instance's id is the view's, the instant Unix nanoseconds (a history holds a million of
// them in a large fleet).
type change struct {
	at       int64
	from, to string
	reasons  []string
}

// transitions returns v's history as Transitions.
func (v *view) transitions() []Transition {
	ts := make([]Transition, len(v.history))
	for i, c := range v.history {
		ts[i] = Transition{InstanceID: v.in.ID, At: instant(c.at), From: c.from, To: c.to, Reasons: c.reasons}
	}
	return ts
}

// The bounds of view.nextDue.
const (
	dueNow   = int64(math.MinInt64)
	dueNever = int64(math.MaxInt64)
)

// dueAt returns t as a view.nextDue: never (and any instant past what Unix nanoseconds
// hold, in 2262) is dueNever; the zero instant (and any before 1678) is dueNow.
func dueAt(t time.Time) int64 {
	switch sec := t.Unix(); {
	case !t.Before(never) || sec >= math.MaxInt64/int64(time.Second):
		return dueNever
	case sec <= math.MinInt64/int64(time.Second):
		return dueNow
	}
	return t.UnixNano()
}

// Monitor owns an Engine for a running registry and is safe for concurrent use: the
// registry feeds it evidence as it arrives and calls Sync on its sweep; discovery reads
// the published verdicts and panic flags. Every change of a published verdict advances the
// monitor's revision and wakes its watchers.
type Monitor struct {
	cfg     MonitorConfig
	metrics *monitorMetrics

	mu     sync.RWMutex
	engine *Engine
	views  map[string]*view
	groups map[groupKey]*group
	panics map[groupKey]bool
	// panicAll holds the groups in panic whose answer includes the never-admitted
	// incarnations: those no member of which was ever admitted.
	panicAll  map[groupKey]bool
	rev       int64
	syncs     uint64
	following bool // another replica judges: published verdicts are the followed ones
	// the recent samples of the two budgets (budget.go)
	withdrawals, admissions budgetLog
	changedIDs              map[string]struct{} // instances whose state changed since TakeChanged (nil until someone asks)
	// rampMoved says, on the elected replica, that the weight of a slow start moved, or the
	// slow start ended, since TakeRampMoved; judgedAt is the latest instant it judged a
	// verdict at, and tickedAt the latest instant a sweep or an Advance weighed the views due
	// at (the ramp clock it publishes: every slot up to it was weighed); rampClock is, on a
	// follower, the elected replica's ramp clock (see SetRampClock). rampTouched holds, on the
	// elected replica, the instances whose slow start its own engine weighed again (or ended)
	// since the last ramp clock came back through the store: the answers that clock moves.
	rampMoved   bool
	rampCover   int64 // a ramp clock is due once a sweep or an Advance reached it (unix ns; 0: none)
	judgedAt    time.Time
	tickedAt    time.Time
	rampClock   time.Time
	rampTouched map[string]struct{}
	// ramping holds, on a follower, the views on a slow start weighed at the ramp clock that
	// has not ended: those a new clock weighs again (not the whole fleet).
	ramping map[*view]struct{}
	changed chan struct{}
	// onPublish hears each publication (OnPublish): touched holds the instances whose
	// published verdict changed since the last one, touchedAll that a change of every answer
	// came (a panic flag), or more instances than touched keeps.
	onPublish  func(rev int64, touched []Instance, all bool)
	touched    []Instance
	touchedAll bool
	// onWithdrawal hears the publications that carry a withdrawal (OnWithdrawalPublished);
	// withdrawnAt is the first withdrawal verdict since the last publication (zero: none).
	onWithdrawal func(rev int64, verdictAt time.Time)
	withdrawnAt  time.Time
	timeline     map[string][]apiv1.TimelineBucket // by capability, oldest first
	// panicSince holds when each group in panic entered it, until TransitionPanicSustained is said
	panicSince map[groupKey]time.Time
	// due holds the views by the instant their verdict may next change by itself, so that a
	// sweep looks at those alone; allDue says every verdict is due at the next sweep.
	due    dueQueue
	allDue bool
	// dirty holds the groups whose counters moved since the last sweep: only their panic
	// flags can have changed.
	dirty map[groupKey]struct{}
	// sampleBuf is the timeline's per-capability scratch space, kept between sweeps;
	// sampledAt is when sample last walked the groups.
	sampleBuf map[string]*capSample
	sampledAt time.Time
	// movedSinceSample: some group's counters moved at an Advance since the last sample.
	movedSinceSample bool
}

// NewMonitor returns a monitor with cfg.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TimelineBucket == 0 {
		cfg.TimelineBucket = DefaultTimelineBucket
	}
	if cfg.PanicIncidentAfter == 0 {
		cfg.PanicIncidentAfter = time.Minute
	}
	if cfg.RampStep == 0 {
		cfg.RampStep = time.Second
	}
	e, err := New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	cfg.Engine = e.cfg
	m := &Monitor{cfg: cfg, engine: e, views: map[string]*view{}, groups: map[groupKey]*group{},
		panics: map[groupKey]bool{}, panicAll: map[groupKey]bool{}, changed: make(chan struct{}), timeline: map[string][]apiv1.TimelineBucket{},
		panicSince: map[groupKey]time.Time{}, dirty: map[groupKey]struct{}{}, ramping: map[*view]struct{}{}}
	if m.metrics, err = newMonitorMetrics(cfg.Registerer, m); err != nil {
		return nil, err
	}
	if cfg.RampStep > 0 {
		m.due.width = max(int64(cfg.RampStep/rampSlots), 1)
	}
	return m, nil
}

// Register records a (re-)registration of in at generation gen: a new incarnation starts
// from scratch.
//
// It returns the instance's Handle: Reader.VerdictOf reads its verdict without a lookup by id.
func (m *Monitor) Register(in Instance, gen int64, at time.Time) *Handle {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.register(in, gen, at)
	m.publish(m.refresh(in.ID, at))
	return &Handle{v: m.views[in.ID], generation: gen}
}

// Handle names one incarnation the monitor holds, for reads without a lookup by id.
type Handle struct {
	v          *view
	generation int64
}

func (m *Monitor) register(in Instance, gen int64, at time.Time) {
	v, ok := m.views[in.ID]
	if ok {
		m.ungroup(v)
		for _, g := range v.groups {
			m.panic(g.key, at) // the old incarnation's groups lost it
		}
		m.release(v)
		v.generation = gen
	} else {
		v = &view{generation: gen, state: apiv1.EligibilityAbsent, since: at.UnixNano(), ungrouped: true}
		m.views[in.ID] = v
	}
	v.nextDue, v.rampUntil = dueNow, 0 // a new incarnation is judged at once, by the engine
	v.fresh = true
	v.phase = rampPhase(in.Service)
	m.schedule(v)
	m.engine.Declare(in)
	m.engine.Apply(Event{At: at, ID: in.ID, Kind: KindRegistered})
	v.in = m.engine.instances[in.ID]
	v.lastRenewal, v.health = at.UnixNano(), "ok"
	if cap(v.groups) < len(in.Capabilities) {
		v.groups = make([]*group, 0, len(in.Capabilities)) // exactly: a million views hold these
	}
	v.groups = v.groups[:0]
	for _, c := range in.Capabilities {
		k := groupKey{c, in.Zone}
		g := m.groups[k]
		if g == nil {
			g = &group{key: k}
			m.groups[k] = g
		}
		g.refs++
		v.groups = append(v.groups, g)
	}
}

// Observe applies one piece of evidence (a heartbeat, deregistration, probe or outcome) about
// a registered instance. Evidence about an instance the monitor does not hold is dropped.
func (m *Monitor) Observe(ev Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.views[ev.ID]
	if !ok {
		return nil
	}
	return m.observe(v, ev)
}

// ObserveVia is Observe for the incarnation h names (ev.ID must be its id): the heartbeat
// path, without a lookup by id. Evidence about an incarnation that is gone is dropped.
func (m *Monitor) ObserveVia(h *Handle, ev Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h == nil || h.v.gone || h.v.generation != h.generation {
		return nil
	}
	return m.observe(h.v, ev)
}

func (m *Monitor) observe(v *view, ev Event) error {
	if changes, err := m.apply(v, ev); err != nil || !changes {
		return err
	}
	m.publish(m.refresh(ev.ID, ev.At))
	return nil
}

// apply applies evidence about v to the engine and reports whether it can change v's
// verdict; the caller then judges v, at once or at the sweep. A renewal that changes
// nothing (a heartbeat's usual case) is applied the quiet way, with no judgment. Any other
// evidence zeroes v.rampUntil: until judged again, v is not weighed from what was known
// before it (reweigh).
func (m *Monitor) apply(v *view, ev Event) (bool, error) {
	if ev.Kind == KindHeartbeat && v.in != nil && v.in.present && m.engine.quietRenewal(v.in, ev) {
		v.lastRenewal = ev.At.UnixNano() // nothing published changes
		return false, nil
	}
	ejected := m.engine.Ejections()
	if err := m.engine.Apply(ev); err != nil {
		return false, err
	}
	if ev.Kind == KindOutcome {
		for _, d := range m.engine.TakeDisputes() {
			m.metrics.disputed.Inc()
			if m.cfg.OnTransition != nil {
				m.cfg.OnTransition(Transition{InstanceID: d.InstanceID, At: d.At.UTC(), To: TransitionOutcomeDisputed, Reasons: []string{d.Reporter, d.Detail}})
			}
		}
	}
	if n := m.engine.Ejections() - ejected; n > 0 {
		m.metrics.ejections.Add(float64(n))
	}
	m.cohortTransitions()
	if ev.Kind == KindHeartbeat {
		v.lastRenewal, v.health = ev.At.UnixNano(), cmp.Or(ev.Health, "ok")
	}
	v.rampUntil = 0
	return true, nil
}

// Forget drops an instance the registry no longer holds.
func (m *Monitor) Forget(id string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forget(id, at)
	m.publish(true)
}

func (m *Monitor) forget(id string, at time.Time) {
	v, ok := m.views[id]
	if !ok {
		return
	}
	m.ungroup(v) // not touched: the registry forgets an instance it no longer holds, which no answer has
	delete(m.views, id)
	delete(m.changedIDs, id)
	delete(m.ramping, v)
	v.gone = true
	m.engine.Forget(id)
	for _, g := range v.groups {
		m.panic(g.key, at)
	}
	m.release(v)
}

// Sync reconciles the monitor with the registry's fleet (records registered or renewed
// through another replica, restored from a snapshot, or removed), applies what time has
// brought (slow-start progress, ends of ejections and quarantines, lease expiry,
// self-preservation) and republishes every verdict. The registry calls it on its sweep.
func (m *Monitor) Sync(now time.Time, fleet Fleet) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fleet != nil {
		m.reconcile(now, fleet)
	}
	m.tickAndPublish(now, true)
}

// SyncChanged is Sync for a registry that knows which instances changed since it last
// synced (a replica whose store tells it what other replicas changed): the members of changed
// are reconciled as Sync's fleet is, the instances of gone are forgotten, and the others are
// left as they are, so that a sweep costs what changed rather than a walk of the fleet.
func (m *Monitor) SyncChanged(now time.Time, changed Fleet, gone []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range changed.Len() {
		m.reconcileMember(now, changed, i)
	}
	for _, id := range gone {
		m.forget(id, now)
	}
	m.tickAndPublish(now, true)
}

// reconcile declares the fleet's incarnations the monitor does not hold, applies renewals and
// self-reports that reached this replica through the store only, and forgets the rest.
func (m *Monitor) reconcile(now time.Time, fleet Fleet) {
	m.syncs++
	for i := range fleet.Len() {
		m.reconcileMember(now, fleet, i)
	}
	for id, v := range m.views {
		if v.synced != uint32(m.syncs) {
			m.forget(id, now)
		}
	}
}

// reconcileMember declares the fleet's member i unless the monitor holds its incarnation, and
// applies a renewal or a self-report that reached this replica through the store only.
func (m *Monitor) reconcileMember(now time.Time, fleet Fleet, i int) {
	f := fleet.Member(i)
	v, ok := m.views[f.ID]
	if !ok || v.generation != f.Generation {
		m.register(fleet.Instance(i), f.Generation, f.RegisteredAt)
		v = m.views[f.ID]
	}
	v.synced = uint32(m.syncs)
	// A renewal, or a new self-report that reached this replica through the store only.
	renewedSince := !f.LastRenewal.IsZero() && f.LastRenewal.UnixNano() > v.lastRenewal
	if renewedSince || f.Health != "" && f.Health != v.health {
		at := f.LastRenewal
		if !renewedSince {
			at = now
		}
		// the monitor holds the instance (declared above): Apply has nothing to refuse
		if changes, _ := m.apply(v, Event{At: at, ID: f.ID, Kind: KindHeartbeat, Health: f.Health}); changes {
			// a new self-report, the end of a silence: judged at this sweep, not when the
			// verdict would next change by itself
			v.nextDue = dueNow
			m.schedule(v)
		}
	}
}

// tickAndPublish applies time at now and republishes what changed. Only verdicts that can
// have changed by themselves since they were last computed (slow start in progress, an
// ejection or a quarantine ending, silence, a lease ending) are computed again — all of them
// when self-preservation changed. A sweep (full) also samples the timeline and says which
// panics lasted.
func (m *Monitor) tickAndPublish(now time.Time, full bool) {
	wasSP := m.engine.SelfPreservation()
	m.engine.Tick(now)
	rejudged := false             // verdicts the Tick changed: ejected as outliers, or admitted from a queue
	ids := m.engine.TakeEjected() // relative outliers the Tick's cohort judgments ejected
	m.metrics.ejections.Add(float64(len(ids)))
	for _, id := range ids {
		rejudged = m.refresh(id, now) || rejudged
	}
	for _, id := range m.engine.TakeAdmitted() { // admitted from their cohorts' queues
		rejudged = m.refresh(id, now) || rejudged
	}
	for _, zc := range m.engine.TakeZoneChanges() {
		if m.cfg.OnTransition != nil {
			m.cfg.OnTransition(zoneTransition(zc))
		}
	}
	m.cohortTransitions()
	spChanged := m.engine.SelfPreservation() != wasSP
	if sp := m.engine.SelfPreservation(); spChanged {
		// Everything said comes from the decision itself: the numbers it used, and why.
		d := m.engine.SelfPreservationDecision()
		if m.cfg.OnTransition != nil {
			to := TransitionSelfPreservation
			if !sp {
				to = TransitionSelfPreservationOver
			}
			m.cfg.OnTransition(Transition{At: now.UTC(), To: to, Reasons: []string{fmt.Sprintf("%s: %d renewals of %.0f expected (%.0f%%) from %d instances",
				d.Reason, d.Received, d.Expected, 100*d.Ratio, d.Live)}})
		}
		attrs := []slog.Attr{slog.String("reason", d.Reason), slog.Float64("renewal_ratio", d.Ratio),
			slog.Int("renewals", d.Received), slog.Float64("expected", d.Expected), slog.Int("renewing_instances", d.Live)}
		if sp {
			m.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "self-preservation on: lease expiry stops evicting",
				append(attrs, slog.Float64("enter_below", m.cfg.Engine.SelfPreservationEnter), slog.Duration("at_most", m.cfg.Engine.SelfPreservationMax))...)
		} else {
			m.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "self-preservation off: lease expiry evicts again",
				append(attrs, slog.Float64("exit_at", m.cfg.Engine.SelfPreservationExit))...)
		}
	}
	changed := false
	if spChanged || m.allDue {
		m.allDue = false
		for _, v := range m.views {
			changed = m.refreshVerdict(v, now) || changed
		}
	} else {
		// only the views whose verdict may have changed by itself; one due again at once
		// (slow start) waits for the next sweep
		judged := false
		m.due.takeDue(now, func(v *view) {
			if now.UnixNano() < v.nextDue {
				m.schedule(v) // evidence moved it later since it was queued
				return
			}
			judged = true
			changed = m.reweigh(v, now) || changed
		})
		if judged && now.After(m.judgedAt) {
			m.judgedAt = now
		}
	}
	if now.After(m.tickedAt) {
		m.tickedAt = now
	}
	moved := len(m.dirty) > 0
	for k := range m.dirty {
		if g := m.groups[k]; g != nil {
			g.dirty = false
		}
		changed = m.panic(k, now) || changed
	}
	if len(m.dirty) > 1024 { // a big map costs its size to walk, even empty
		m.dirty = map[groupKey]struct{}{}
	} else {
		clear(m.dirty)
	}
	if full {
		m.sustained(now)
		m.sample(now, moved || m.movedSinceSample)
		m.movedSinceSample = false
	} else {
		m.movedSinceSample = m.movedSinceSample || moved
	}
	m.publish(changed || spChanged || rejudged)
}

// schedule puts v in the due queue at its nextDue, unless an entry at that instant or
// earlier is there already (a view found early is queued again).
func (m *Monitor) schedule(v *view) {
	if v.gone || v.nextDue >= dueNever {
		return
	}
	at := v.nextDue
	if v.queued && v.queuedAt <= at {
		return
	}
	v.queued, v.queuedAt = true, at
	m.due.push(at, v, len(m.views))
}

// refresh recomputes the verdict on id and the panic flags of its groups; it reports
// whether anything published changed.
func (m *Monitor) refresh(id string, now time.Time) bool {
	v, ok := m.views[id]
	if !ok || !m.refreshVerdict(v, now) {
		return false
	}
	for _, g := range v.groups {
		m.panic(g.key, now)
	}
	return true
}

// refreshVerdict judges v again at now and reports whether what it publishes changed.
func (m *Monitor) refreshVerdict(v *view, now time.Time) bool {
	if now.After(m.judgedAt) {
		m.judgedAt = now
	}
	var nv Verdict
	if f, _, ok := m.followedOf(v); ok {
		nv = m.followedVerdict(f, v.phase, now)
		v.nextDue, v.rampUntil = dueNever, 0 // it changes with what the elected replica publishes (SetRampClock)
		switch {
		case nv.State == apiv1.EligibilitySlowStart && f.Weight == 0:
			m.ramping[v] = struct{}{} // weighed again at each ramp clock
		case nv.State == apiv1.EligibilitySlowStart:
			v.nextDue = now.UnixNano() // an earlier version's step ends on this replica's clock
			fallthrough
		default:
			delete(m.ramping, v)
		}
	} else {
		nv = m.engine.published(v.in, m.engine.verdictOf(v.in, now), now)
		v.nextDue = dueAt(m.engine.nextChange(v.in, now))
		v.rampFrom, v.rampUntil = m.engine.rampUntil(v.in, now)
		if n := now.UnixNano(); v.nextDue == n && v.rampUntil > n { // in slow start: only its weight changes until rampUntil
			v.nextDue = m.nextSlot(v, n)
		}
		v.rampCap = 100
		if nv.State == apiv1.EligibilityDegraded {
			v.rampCap = int16(m.cfg.Engine.DegradedWeight)
		}
	}
	m.schedule(v)
	return m.setVerdict(v, nv, now)
}

// setVerdict makes nv v's verdict at now: it recounts v's groups, records a transition, and
// reports whether anything published changed.
func (m *Monitor) setVerdict(v *view, nv Verdict, now time.Time) bool {
	old := v.verdict()
	recounted := m.recount(v, countAs(nv.State, nv.Reasons)) // a new incarnation in the same state still counts anew
	if nv.State == old.State && nv.Weight == old.Weight && slices.Equal(nv.Reasons, old.Reasons) {
		return recounted
	}
	v.state, v.weight, v.reasons = nv.State, int32(nv.Weight), nv.Reasons
	if first := v.fresh; !first || !m.firstAsDerived(v, nv) {
		m.touch(v)
	}
	v.fresh = false
	if m.changedIDs != nil && !m.following {
		if published(old) != published(nv) {
			m.changedIDs[v.in.ID] = struct{}{} // the elected replica publishes it
		}
		if old.State == apiv1.EligibilitySlowStart && v.in != nil {
			// A ramp moved (its weight, or it ended): the elected replica publishes its ramp
			// clock, and the store tells this answer at the clock's revision (SetRampClock).
			m.rampMoved = true
			if m.due.width > 0 {
				// and again a step later: evidence may have moved it between two slots, and a
				// follower weighs it at its slot of the clock (see TakeRampMoved)
				m.rampCover = max(m.rampCover, now.UnixNano()+int64(m.cfg.RampStep))
			}
			if m.rampTouched == nil {
				m.rampTouched = map[string]struct{}{}
			}
			m.rampTouched[v.in.ID] = struct{}{}
		}
	}
	if nv.State != old.State {
		if !m.following {
			m.budgets(v, old, nv, now)
		}
		// its id is read only here: a weight step of a million views in slow start does not
		// load their records
		id := v.in.ID
		t := Transition{InstanceID: id, At: now.UTC(), From: old.State, To: nv.State, Reasons: nv.Reasons}
		v.since = now.UnixNano()
		c := change{at: v.since, from: t.From, to: t.To, reasons: t.Reasons}
		if n := len(v.history); n == m.cfg.History && n > 0 {
			// full: shift in place (re-slicing past the oldest and appending copied the whole
			// history at every transition of a view that had made 20)
			copy(v.history, v.history[1:])
			v.history[n-1] = c
		} else {
			v.history = append(v.history, c)
		}
		m.metrics.transition(t)
		// the attributes only when the line is written: at debug (every registration's first
		// verdict, every ramp's end) building them was an allocation per transition for nothing
		if ctx, level := context.Background(), transitionLevel(old.State, nv.State); m.cfg.Logger.Enabled(ctx, level) {
			m.cfg.Logger.LogAttrs(ctx, level, "eligibility", slog.String("instance_id", id),
				slog.String("from", old.State), slog.String("to", nv.State), slog.Any("reasons", nv.Reasons), slog.Int("weight", nv.Weight))
		}
		if m.cfg.OnTransition != nil {
			m.cfg.OnTransition(t)
		}
	}
	return true
}

// transitionLevel is the log level of a transition from one state to another. The steps
// every registration takes by itself are logged at debug: its first verdict (out of
// absent), its admission by the first probes (unknown to slow start) and the end of its
// ramp (slow start to serving). The journal records each of them, and the transitions
// counter counts them; logged at info, each was a line per registration: 7 % of the
// registry's CPU while a fleet registers for the first verdicts, and half a million lines
// a minute for the ramps' ends while a million instances registered again after a restart.
// Every other transition is logged at info.
func transitionLevel(from, to string) slog.Level {
	switch {
	case from == apiv1.EligibilityAbsent,
		from == apiv1.EligibilityUnknown && to == apiv1.EligibilitySlowStart,
		from == apiv1.EligibilitySlowStart && to == apiv1.EligibilityServing:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// Watch returns the monitor's revision and a channel closed when it next changes.
func (m *Monitor) Watch() (int64, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev, m.changed
}

// Verdict returns the published state and weight of id; ok is false when the monitor does
// not hold it.
func (m *Monitor) Verdict(id string) (state string, weight int, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Reader{m}.Verdict(id)
}

// Reader reads published verdicts and panic flags while the monitor's read lock is held.
type Reader struct{ m *Monitor }

// Verdict is Monitor.Verdict under the held lock.
func (r Reader) Verdict(id string) (state string, weight int, ok bool) {
	v, ok := r.m.views[id]
	if !ok {
		return "", 0, false
	}
	return v.state, int(v.weight), true
}

// VerdictOf is Verdict for the incarnation h names (ok false once it is gone or replaced).
func (r Reader) VerdictOf(h *Handle) (state string, weight int, ok bool) {
	if h == nil || h.v.gone || h.v.generation != h.generation {
		return "", 0, false
	}
	return h.v.state, int(h.v.weight), true
}

// VerdictAt is Verdict for incarnation gen of id: ok is false unless the monitor holds that
// incarnation.
func (r Reader) VerdictAt(id string, gen int64) (state string, weight int, ok bool) {
	v, ok := r.m.views[id]
	if !ok || v.generation != gen {
		return "", 0, false
	}
	return v.state, int(v.weight), true
}

// Read calls fn with a Reader, under one read lock: a discovery answer of thousands of
// entries takes the lock once. fn must not call the monitor.
func (m *Monitor) Read(fn func(Reader)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	fn(Reader{m})
}

// SelfPreservation reports whether lease expiry is suspended.
func (m *Monitor) SelfPreservation() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.engine.SelfPreservation()
}

// Explain returns the verdict on id with the evidence behind each reason and its last
// transitions; ok is false when the monitor does not hold id.
func (m *Monitor) Explain(id string, now time.Time) (Explanation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.views[id]
	if !ok {
		return Explanation{}, false
	}
	m.publish(m.refresh(id, now)) // the answer and its history agree: a change due by now is recorded first
	verdict, reasons := m.engine.Explain(id, now)
	if pv := v.verdict(); pv.State == apiv1.EligibilityEvacuated && verdict.State == apiv1.EligibilityUnknown {
		verdict = pv // never admitted, in an evacuated zone: published evacuated (Engine.published)
		reasons = append(reasons, Reason{Code: ReasonEvacuated, Evidence: m.engine.evacuationEvidence(v.in, now, ReasonEvacuated)})
	}
	if f, derived, ok := m.followedOf(v); ok {
		detail := "judged by the elected replica, which probes"
		if derived {
			detail = "the first verdict, derived from the registration: the elected replica has published none on this incarnation"
		}
		verdict, reasons = v.verdict(), make([]Reason, 0, len(v.reasons))
		for _, code := range v.reasons {
			reasons = append(reasons, Reason{Code: code, Evidence: Evidence{At: f.Since, Detail: detail}})
		}
	}
	return Explanation{InstanceID: id, Generation: v.generation, State: verdict.State, Weight: verdict.Weight,
		Since: instant(v.since), Reasons: reasons, Transitions: v.transitions(), Outcomes: m.engine.outcomeWindow(v.in, now)}, true
}

// counts returns how many instances are in each state, and how many groups are in panic.
func (m *Monitor) counts() (map[string]int, int, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]int{}
	for _, v := range m.views {
		out[v.state]++
	}
	return out, len(m.panics), m.engine.SelfPreservation()
}

// OutlierZones returns the zone outliers of the last judgment (Engine.OutlierZones).
func (m *Monitor) OutlierZones() []apiv1.ZoneOutlier {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.engine.OutlierZones()
}

// outliers returns what the outlier gauges report: the relative outliers by (capability,
// zone), and the zone outliers.
// As of the last sweep: a scrape has no clock of its own.
func (m *Monitor) outliers() (map[[2]string]int, []apiv1.ZoneOutlier) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.engine.OutlierInstances(m.engine.ticked), m.engine.OutlierZones()
}

// OutcomeWindow returns what reporters saw of id over the outlier window ending at now,
// beside its cohorts' baselines; nil when nothing was reported or id is unknown.
func (m *Monitor) OutcomeWindow(id string, now time.Time) *apiv1.OutcomeWindow {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.views[id]
	if !ok {
		return nil
	}
	return m.engine.outcomeWindow(v.in, now)
}
