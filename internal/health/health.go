package health

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Reason codes.
const (
	ReasonAdmitting            = "ADMITTING"
	ReasonSlowStart            = "SLOW_START"
	ReasonSilent               = "SILENT"
	ReasonSelfReportedDegraded = "SELF_REPORTED_DEGRADED"
	ReasonDraining             = "DRAINING"
	ReasonProbeFailing         = "PROBE_FAILING"
	ReasonProbeRefused         = "PROBE_REFUSED"
	ReasonSelfReportedFailing  = "SELF_REPORTED_FAILING"
	ReasonSilentCorroborated   = "SILENT_CORROBORATED"
	ReasonQuarantineEnded      = "QUARANTINE_ENDED"
	ReasonFlapping             = "FLAPPING"
	ReasonOutlierErrorRate     = "OUTLIER_ERROR_RATE"
	ReasonOutlierConnect       = "OUTLIER_CONNECT_FAILURES"
	ReasonOperatorWithdrawn    = "OPERATOR_WITHDRAWN"
	// ReasonOperatorForced goes with OPERATOR_WITHDRAWN when the operator forced a withdrawal
	// that empties a pool (past OVERRIDE_UNSAFE): the instance is no member of its groups
	// and is kept out even when they panic — the operator's decision wins.
	ReasonOperatorForced = "OPERATOR_FORCED"
	ReasonEvacuated      = "EVACUATED"
	ReasonReturning      = "RETURNING"
	// ReasonRuntimeNotReady: the runtime that runs the instance says it is not ready
	// (Kubernetes readiness, reported as heartbeat health not_ready by meshflows kube-sync).
	ReasonRuntimeNotReady = "RUNTIME_NOT_READY"
)

// Event kinds and values.
const (
	KindRegistered   = "registered"
	KindHeartbeat    = "heartbeat"
	KindDeregistered = "deregistered"
	KindProbe        = "probe"
	KindOutcome      = "outcome"
	// Operator actions (operator.go).
	KindOverride        = "override"
	KindEvacuate        = "evacuate"
	KindEvacuationEnded = "evacuation_ended"

	ProbeOK      = "ok"
	ProbeFail    = "fail"
	ProbeTimeout = "timeout"
	ProbeRefused = "refused"
)

// Instance describes an instance the engine judges.
type Instance struct {
	ID           string
	Zone         string
	Capabilities []string
	// Probe says whether its manifest declares health (the probe class exists).
	Probe bool
	// UnhealthyAfter is the manifest's unhealthy_after (0: the engine's setting).
	UnhealthyAfter int
	// Service is the instance's service_name and Routed whether it is an input of the
	// gateways' routes: the engine does not judge by them; the monitor hands them to
	// Monitor.OnPublish, so that a change of a verdict wakes the long polls of its service
	// alone.
	Service string
	Routed  bool
}

// Event is one piece of evidence about an instance at an instant.
type Event struct {
	At     time.Time
	ID     string
	Kind   string
	Health string // heartbeat: ok, degraded or failing
	Result string // probe: ok, fail, timeout or refused
	// Observed, when set, is when the evidence was observed, before At (the prober reports
	// unanswered probes once re-probes confirm them): the withdrawal budget counts from it.
	Observed time.Time
	// Impostor, on a refused probe: the instance the health endpoint answered as instead (a
	// process that took the registered address is not the registered instance)
	Impostor string
	// outcome: one gateway reporting window, and who reported it (default "gw")
	OK, Errors, ConnectFailures int
	Reporter                    string
	LatencyMsP99                float64 // the reporter's 99th percentile latency, when it sent one

	// override (ID the instance): Action withdraw or release; evacuate and
	// evacuation_ended: Evacuation, Zone, Capability ("" every capability of the zone).
	// Until ends a withdrawal or an evacuation; By and Why say who and why.
	Action                       string
	Evacuation, Zone, Capability string
	Until                        time.Time
	By, Why                      string
	// Force, on a withdraw override: the operator forced a withdrawal that empties a pool;
	// the instance stays out even in panic (ReasonOperatorForced).
	Force bool
}

// Verdict is whether an instance is in rotation, at what weight, and why.
type Verdict struct {
	State   string
	Weight  int
	Reasons []string
}

// InRotation reports whether the verdict puts the instance in rotation.
func (v Verdict) InRotation() bool {
	return apiv1.InRotation(v.State)
}

// instance is the engine's record of one instance.
type instance struct {
	Instance
	causes      map[string]Evidence
	lastRenewal int64 // Unix nanoseconds, as the instants below: a time.Time is three times the size
	// registeredAt is when this incarnation registered.
	registeredAt  int64
	rotationSince int64 // when it (re-)entered rotation: slow start runs from here

	lastHealth   string // the last self-report: ok, degraded or failing
	lastHealthAt int64  // and when it came

	// tr holds what probes, flapping and ejections record; nil until the first of them (a
	// fleet that is neither probed nor troubled does not carry it).
	tr *trouble
	// outcomes are the reported windows of the last outlier_window (outlier.go).
	outcomes []outcomeRec

	// The engine's fleet accounting (see Tick): which incarnation this is, so that the
	// entries an older one left in the engine's queues are recognised as stale, how the
	// renewal expectation counts it, and whether it was forgotten.
	seq  uint64
	live liveness
	gone bool

	// The flags sit together, after the words: apart, each took a word of its own.
	present  bool
	draining bool
	admitted bool
	// renewed is set by the first heartbeat of the incarnation: only instances that have
	// renewed at least once are expected to renew (a fleet that registers and never
	// heartbeats is not a sign that renewals are failing to reach the registry).
	renewed  bool
	degraded bool
	// admittedBefore: this incarnation entered rotation once (its admission was measured)
	admittedBefore bool
	// admitQueued: its probes admit it and it waits for its cohort's admission budget
	admitQueued bool
	// notReady: registered not ready (publish when ready) and no heartbeat has said ok
	// since; never admitted until one does, and answered nowhere meanwhile.
	notReady bool
}

// trouble is the part of an instance's record that probes, withdrawals and ejections fill
// in. Read it through in.troubles() (noTrouble when there is none); write it through
// in.trouble(), which makes it.
type trouble struct {
	okRun     int      // consecutive ok probes
	badRun    int      // consecutive fail/timeout probes
	badSince  int64    // when the run's first failure was observed (Unix nanoseconds)
	lastProbe Evidence // the last probe result

	withdrawals     []time.Time // entries into withdrawn from rotation, for flap detection
	quarantines     int         // how many times it was quarantined
	quarantineUntil time.Time

	ejections  int // how many times it was ejected
	ejectUntil time.Time

	// latency outliers (latency.go): degraded from latencySince until latencyUntil, one
	// outlier_window after the last judgment that found it over
	latencySince, latencyUntil time.Time
	latency                    Evidence

	// the decaying failure score (score.go): its value at scoreAt, and when the evidence
	// that raised it from 0 was observed
	score      float64
	scoreAt    time.Time
	scoreSince int64
}

// sinceNanos returns how long before now the instant at (Unix nanoseconds) was.
func sinceNanos(now time.Time, at int64) time.Duration { return time.Duration(now.UnixNano() - at) }

// instant returns at (Unix nanoseconds) as a time.Time in UTC.
func instant(at int64) time.Time { return time.Unix(0, at).UTC() }

// noTrouble is the record of every instance that has none: read only.
var noTrouble trouble

// troubles returns in's trouble record for reading, noTrouble when it has none.
func (in *instance) troubles() *trouble {
	if in.tr == nil {
		return &noTrouble
	}
	return in.tr
}

// trouble returns in's trouble record for writing, making it on first use.
func (in *instance) trouble() *trouble {
	if in.tr == nil {
		in.tr = &trouble{}
	}
	return in.tr
}

// Evidence is the event behind a reason: when it happened and what it said (the wire type).
type Evidence = apiv1.Evidence

// quarantined reports whether in is in quarantine at now.
func (in *instance) quarantined(now time.Time) bool {
	return in.tr != nil && now.Before(in.tr.quarantineUntil)
}

// Engine is the eligibility state machine. It is not safe for concurrent use; its owner
// serialises events, ticks and queries, in time order, and calls Tick regularly (every
// second, say): lease expiry evicts, and self-preservation enters and ends, at ticks.
type Engine struct {
	cfg       Config
	instances map[string]*instance

	started  bool
	start    time.Time
	renewals renewalLog // heartbeats within the last window, oldest first
	seq      uint64     // the last incarnation numbered

	// Lease expiry and the renewal expectation without walking the fleet at each Tick:
	// leases holds every present, non-draining incarnation by the earliest instant its lease
	// can end; the instances expected to renew (present, not draining, renewed at least
	// once) are counted as old (registered a window ago or more: each owes a full window of
	// renewals) or young (each owes renewals for the part of the window since it
	// registered: youngSum is the sum of their registration instants, as offsets from
	// base, and the young queue says when each turns old).
	leases    instanceQueue
	young     instanceQueue
	oldLive   int
	youngLive int
	youngSum  int64 // nanoseconds
	base      time.Time
	sp        bool // self-preservation: lease expiry does not evict
	spSince   time.Time
	spBlock   bool    // the mode ended by its bound: it cannot return until renewals recover
	ratio     float64 // renewals received over expected in the last window, as of the last Tick
	decision  SelfPreservationDecision
	ejected   int // passive ejections so far

	// What operators decided (operator.go): withdrawals by instance id, which outlive the
	// incarnations, and the evacuations that hold or whose instances are on the way back.
	overrides   map[string]*override
	evacuations map[string]*evacuation
	// disputes are the disputed outcomes since TakeDisputes; judgedRelative when the
	// cohorts were last judged by Tick.
	disputes       []Dispute
	judgedRelative time.Time
	cohorts        map[cohortKey]map[*instance]struct{} // the instances of each (capability, zone)
	dirtyCohorts   map[cohortKey]struct{}               // reported on since the last Tick
	relEjected     []string                             // ejected as relative outliers since TakeEjected
	zoneOutliers   map[cohortKey]apiv1.ZoneOutlier      // the zone outliers of the last judgment
	zoneChanges    []ZoneChange                         // since TakeZoneChanges
	relOut         map[*instance]struct{}               // ejected as relative outliers, until Tick sees it end
	capCounts      map[cohortKey][2]int                 // during a judgment: members and ejected of each group counted
	shares         map[cohortKey]cohortShares           // each cohort's comparable shares, as last judged or explained
	ticked         time.Time                            // the last Tick
	// reporters names the reporters of outcomes; an outcome record holds its index.
	reporters reporterNames
	// flaps are the recent entries into withdrawn of each cohort (cohortflap.go), and
	// cohortChanges the cohort events since TakeCohortChanges.
	flaps         map[cohortKey]*cohortFlap
	cohortChanges []CohortChange
	// admitQ are the cohorts' admission budgets and queues (admission.go); admittedIDs the
	// instances admitted from them since TakeAdmitted.
	admitQ      map[cohortKey]*admitQueue
	admittedIDs []string
}

// SelfPreservationDecision is what the last Tick saw and decided about self-preservation:
// the numbers behind the ratio, so that a log line or an incident quotes exactly what the
// decision used.
type SelfPreservationDecision struct {
	// Received is the heartbeats in the last window; Expected those due from the instances
	// that have renewed at least once (Live of them); Ratio is Received over Expected (1
	// when none are expected).
	Received int
	Expected float64
	Live     int
	Ratio    float64
	// Reason says why the mode changed at this tick: "renewals_low", "renewals_recovered",
	// "bound_reached"; empty when it did not change.
	Reason string
}

// Reasons of a SelfPreservationDecision.
const (
	SelfPreservationRenewalsLow       = "renewals_low"
	SelfPreservationRenewalsRecovered = "renewals_recovered"
	SelfPreservationBoundReached      = "bound_reached"
)

// New returns an engine for cfg (defaults filled in).
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, instances: map[string]*instance{}, overrides: map[string]*override{}, evacuations: map[string]*evacuation{}}, nil
}

// Declare tells the engine about an instance (its zone, capabilities and probe class).
func (e *Engine) Declare(in Instance) {
	if cur, ok := e.instances[in.ID]; ok {
		old := cur.Instance
		cur.Instance = in
		e.indexCohorts(cur, &old)
		return
	}
	rec := &instance{Instance: in}
	e.instances[in.ID] = rec
	e.indexCohorts(rec, nil)
}

// Adopt takes over the verdict another replica judged on an instance this engine has not
// admitted (this replica was just elected): one in rotation there is admitted here, its slow
// start continuing from where it was; one out of rotation waits for this engine's evidence.
func (e *Engine) Adopt(id, state string, since time.Time) {
	in, ok := e.instances[id]
	if !ok || !in.present || in.admitted {
		return
	}
	switch state {
	case apiv1.EligibilitySlowStart:
		in.admitted, in.rotationSince = true, since.UnixNano()
	case apiv1.EligibilityServing, apiv1.EligibilityDegraded:
		in.admitted, in.rotationSince = true, since.Add(-e.cfg.SlowStart).UnixNano()
	}
}

// Forget drops an instance the registry no longer holds (deregistered and removed, or
// evicted), so that the engine's memory follows the fleet.
func (e *Engine) Forget(id string) {
	if in, ok := e.instances[id]; ok {
		in.gone = true
		e.untrack(in)
		for _, c := range in.Capabilities { // out of its cohorts
			k := cohortKey{c, in.Zone}
			delete(e.cohorts[k], in)
			if len(e.cohorts[k]) == 0 {
				delete(e.cohorts, k)
			}
		}
		delete(e.instances, id)
	}
}

func (e *Engine) unhealthyAfter(in *instance) int {
	if in.UnhealthyAfter > 0 {
		return in.UnhealthyAfter
	}
	return e.cfg.UnhealthyAfter
}

// silent reports whether in has not renewed for more than silence_after at now.
func (e *Engine) silent(in *instance, now time.Time) bool {
	return !e.cfg.ExternalLeases && sinceNanos(now, in.lastRenewal) > 2*e.cfg.HeartbeatInterval
}

// expired reports whether in's lease has run out at now.
func (e *Engine) expired(in *instance, now time.Time) bool {
	return !e.cfg.ExternalLeases && sinceNanos(now, in.lastRenewal) >= e.cfg.LeaseTTL
}

// Apply records one event. Events must come in time order, and the owner ticks before an
// event when time has moved (Apply itself never walks the fleet: it costs the same at any size).
func (e *Engine) Apply(ev Event) error {
	switch ev.Kind {
	case KindOverride:
		return e.override(ev)
	case KindEvacuate, KindEvacuationEnded:
		return e.evacuate(ev)
	}
	in, ok := e.instances[ev.ID]
	if !ok {
		return fmt.Errorf("event for undeclared instance %q", ev.ID)
	}
	e.advance(in, ev.At)
	switch ev.Kind {
	case KindRegistered:
		// a new incarnation starts from scratch
		e.untrack(in)
		e.seq++
		at := ev.At.UnixNano()
		*in = instance{Instance: in.Instance, present: true, lastRenewal: at, lastHealth: "ok", lastHealthAt: at, registeredAt: at, seq: e.seq}
		if !in.Probe {
			in.admitted, in.rotationSince = true, ev.At.UnixNano()
			e.withdrawnByOperator(in, ev.At)
		}
		if !e.cfg.ExternalLeases {
			e.leases.pushAt(ev.At.Add(e.cfg.LeaseTTL).UnixNano(), in, len(e.instances), leaseHolds)
		}
	case KindHeartbeat:
		if !in.present {
			return nil // a heartbeat for an instance the registry no longer holds changes nothing
		}
		if e.quietRenewal(in, ev) {
			return nil
		}
		first := !in.renewed // the registration's own health comes as its first heartbeat
		e.renew(in, ev.At)
		in.lastHealth, in.lastHealthAt = cmp.Or(ev.Health, "ok"), ev.At.UnixNano()
		if ev.Health == "not_ready" && (!in.admitted || first && at(in.registeredAt).Equal(ev.At) && len(in.causes) == 0) {
			// not ready since its registration: not admitted until it says ok (publish when
			// ready), never answered meanwhile — not even in a brand-new group's panic
			in.notReady, in.admitted = true, false
			return nil
		}
		if in.notReady {
			in.notReady = false
			e.ready(in, ev.At)
		}
		switch ev.Health {
		case "failing": // added before the other is cleared: one withdrawal, not an end and a new one
			e.addCause(in, ev.At, ReasonSelfReportedFailing, "heartbeat health failing")
			e.clearCauses(in, ev.At, ReasonRuntimeNotReady)
		case "not_ready":
			e.addCause(in, ev.At, ReasonRuntimeNotReady, "the runtime reports the endpoint not ready (Kubernetes readiness)")
			e.clearCauses(in, ev.At, ReasonSelfReportedFailing)
		case "degraded", "ok", "":
			in.degraded = ev.Health == "degraded"
			clear := []string{ReasonSelfReportedFailing, ReasonRuntimeNotReady}
			if !in.Probe && !in.quarantined(ev.At) {
				clear = append(clear, ReasonQuarantineEnded)
			}
			e.clearCauses(in, ev.At, clear...)
		default:
			return fmt.Errorf("heartbeat health %q: want ok, degraded, failing or not_ready", ev.Health)
		}
	case KindDeregistered:
		in.draining = true
		e.untrack(in)
	case KindProbe:
		if !in.present || !in.Probe {
			return nil
		}
		e.probe(in, ev)
	case KindOutcome:
		if !in.present {
			return nil
		}
		e.outcome(in, ev)
	default:
		return fmt.Errorf("event kind %q is not supported", ev.Kind)
	}
	return nil
}

// quietRenewal applies a heartbeat that can change no verdict — the self-report it repeats,
// an instance that was not silent and has no withdrawal cause — and reports whether it did.
// It is the path of almost every heartbeat, so it touches only the renewal.
func (e *Engine) quietRenewal(in *instance, ev Event) bool {
	h := cmp.Or(ev.Health, "ok")
	if h != in.lastHealth || len(in.causes) > 0 || e.silent(in, ev.At) {
		return false
	}
	in.lastHealthAt = ev.At.UnixNano()
	e.renew(in, ev.At)
	return true
}

// renew records a renewal of in at at.
func (e *Engine) renew(in *instance, at time.Time) {
	in.lastRenewal, in.renewed = at.UnixNano(), true
	e.renewals.add(at)
	if in.live == notCounted && !in.draining && !e.cfg.ExternalLeases {
		e.track(in, at)
	}
}

// advance applies the time-driven changes due by now: the end of an ejection or of an
// operator's withdrawal.
func (e *Engine) advance(in *instance, now time.Time) {
	if t := in.tr; t != nil && !t.ejectUntil.IsZero() && !now.Before(t.ejectUntil) {
		e.clearCauses(in, t.ejectUntil, ReasonOutlierErrorRate, ReasonOutlierConnect, ReasonOutlierRelative)
		t.ejectUntil = time.Time{}
	}
	if len(e.overrides) > 0 {
		e.overrideEnds(in, now)
	}
}

// outcome records a reported window in in's pooled window, ejects an admitted instance
// whose window shows it failing — unless too much of one of its groups is ejected already,
// or other reporters dispute it (they see it healthy: this reporter's path is broken) — and
// marks its cohorts for the next Tick's relative-outlier judgment.
func (e *Engine) outcome(in *instance, ev Event) {
	reporter := cmp.Or(ev.Reporter, DefaultReporter)
	if ev.ConnectFailures > 0 && in.Probe {
		e.addScore(in, ev.At, 1) // passive evidence: a failed probe confirms it (score.go)
	}
	if ev.OK+ev.Errors > 0 {
		in.outcomes = append(in.outcomes, outcomeRec{at: ev.At.UnixNano(), reporter: e.reporters.index(reporter),
			ok: int32(min(ev.OK, math.MaxInt32)), errs: int32(min(ev.Errors, math.MaxInt32)), p99: float32(ev.LatencyMsP99)})
	}
	var cause string
	switch requests := ev.OK + ev.Errors; {
	case ev.ConnectFailures >= e.cfg.OutlierConnectFailures:
		cause = ReasonOutlierConnect
	case requests >= e.cfg.OutlierMinRequests && float64(ev.Errors) >= e.cfg.OutlierErrorRate*float64(requests):
		cause = ReasonOutlierErrorRate
	}
	if cause != "" && in.admitted && in.troubles().ejectUntil.IsZero() {
		if d, why := e.disputed(in, reporter, ev.At); d {
			e.disputes = append(e.disputes, Dispute{At: ev.At, InstanceID: in.ID, Reporter: reporter,
				Detail: fmt.Sprintf("%s reported ok=%d errors=%d connect_failures=%d; %s: the outcome is disputed and ignored", reporter, ev.OK, ev.Errors, ev.ConnectFailures, why)})
			cause = ""
		}
	}
	if cause != "" && in.admitted && in.troubles().ejectUntil.IsZero() && !e.ejectionCapped(in, ev.At) {
		t := in.trouble()
		t.ejections++
		e.ejected++
		t.ejectUntil = ev.At.Add(time.Duration(t.ejections) * e.cfg.EjectionBase)
		e.addCause(in, ev.At, cause, fmt.Sprintf("gateway window ok=%d errors=%d connect_failures=%d from %s; ejection %d until %s",
			ev.OK, ev.Errors, ev.ConnectFailures, reporter, t.ejections, t.ejectUntil.UTC().Format(time.RFC3339)))
	}
	e.markCohorts(in) // judged at the next Tick: once per cohort, not once per outcome
}

// addCause adds a withdrawal cause at now with the evidence behind it; an entry into
// withdrawn from rotation counts towards flapping, and flap_limit entries within flap_window
// quarantine the instance.
func (e *Engine) addCause(in *instance, now time.Time, cause, detail string) {
	if !in.admitted {
		return
	}
	entering := len(in.causes) == 0
	if _, had := in.causes[cause]; !had {
		if in.causes == nil {
			in.causes = map[string]Evidence{}
		}
		in.causes[cause] = Evidence{At: now, Detail: detail}
	}
	if !entering || in.quarantined(now) {
		return
	}
	if e.cohortFlapping(in, now) {
		return // one cohort event, not this instance's flap
	}
	tr := in.trouble()
	recent := tr.withdrawals[:0]
	for _, t := range tr.withdrawals {
		if now.Sub(t) < e.cfg.FlapWindow {
			recent = append(recent, t)
		}
	}
	tr.withdrawals = append(recent, now)
	if len(tr.withdrawals) < e.cfg.FlapLimit {
		return
	}
	tr.quarantines++
	d := e.cfg.Quarantine << min(tr.quarantines-1, 30)
	if d <= 0 || d > e.cfg.QuarantineMax {
		d = e.cfg.QuarantineMax
	}
	tr.quarantineUntil = now.Add(d)
	in.causes[ReasonQuarantineEnded] = Evidence{At: now, Detail: fmt.Sprintf("quarantine %d for %s: %d withdrawals within %s", tr.quarantines, d, e.cfg.FlapLimit, e.cfg.FlapWindow)}
	tr.withdrawals = nil
	tr.okRun = 0
}

// clearCauses removes causes; when the last one goes, slow start begins at now.
func (e *Engine) clearCauses(in *instance, now time.Time, causes ...string) {
	had := len(in.causes) > 0
	_, scored := in.causes[ReasonProbeScore]
	for _, c := range causes {
		delete(in.causes, c)
	}
	if had && len(in.causes) == 0 {
		in.rotationSince = now.UnixNano()
		if !scored && in.tr != nil {
			in.tr.score = 0 // back from another cause: the score is for what happens in rotation
		}
	}
}

// never is an instant no verdict waits for.
var never = time.Unix(1<<40, 0)

// nextChange returns the earliest instant after now at which in's verdict may change with no
// new evidence (now itself while slow start ramps its weight; never when nothing is due).
func (e *Engine) nextChange(in *instance, now time.Time) time.Time {
	switch {
	case in == nil || !in.present:
		return never
	case e.ramping(in, now):
		return now
	case len(e.evacuations) > 0 && e.returningRamp(in, now):
		return now // its weight is the smaller of the ramp's and the return step's
	}
	return e.otherChange(in, now)
}

// ramping reports whether in is in rotation within its slow start at now: its weight grows
// with time.
func (e *Engine) ramping(in *instance, now time.Time) bool {
	return in.admitted && len(in.causes) == 0 && !in.draining && !in.quarantined(now) && sinceNanos(now, in.rotationSince) < e.cfg.SlowStart &&
		(len(e.evacuations) == 0 || !e.covered(in, now))
}

// rampWeight is the weight of an instance elapsed into its slow start.
func (e *Engine) rampWeight(elapsed time.Duration) int {
	return 10 + int(90*elapsed/e.cfg.SlowStart)
}

// rampUntil returns, for an instance ramping at now, when its slow start began and the
// instant until which nothing but its weight can change its verdict without new evidence:
// the end of the slow start, or an earlier instant at which something else falls due
// (silence, the lease's end, an ejection or a quarantine ending). For an instance not
// ramping at now, until is 0: never past now.
func (e *Engine) rampUntil(in *instance, now time.Time) (from, until int64) {
	if in == nil || !in.present || !e.ramping(in, now) {
		return 0, 0
	}
	return in.rotationSince, min(dueAt(e.otherChange(in, now)), in.rotationSince+int64(e.cfg.SlowStart))
}

// otherChange is nextChange for an instance that is not ramping: the earliest instant after
// now at which its verdict may change by itself (now when its lease ended before a Tick
// evicted it, never when nothing is due).
func (e *Engine) otherChange(in *instance, now time.Time) time.Time {
	next := never
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	if t := in.tr; t != nil {
		if !t.ejectUntil.IsZero() {
			consider(t.ejectUntil)
		}
		consider(t.quarantineUntil)
		consider(t.latencyUntil)
	}
	if len(e.overrides) > 0 || len(e.evacuations) > 0 {
		e.operatorChanges(in, now, consider)
	}
	if !e.cfg.ExternalLeases {
		last := instant(in.lastRenewal)
		consider(last.Add(2*e.cfg.HeartbeatInterval + time.Nanosecond)) // silent from just after
		end := last.Add(e.cfg.LeaseTTL)
		if !end.After(now) && !in.draining && !e.sp {
			// judged (on new evidence) after its lease ended and before the Tick that ends
			// it: due at that Tick, or the verdict would stay "in rotation" until the next
			// evidence
			return now
		}
		consider(end)
	}
	return next
}

// Verdict returns the verdict on id at now (after every event up to now).
func (e *Engine) Verdict(id string, now time.Time) Verdict {
	return e.verdictOf(e.instances[id], now)
}

// The single reasons of the most common verdicts, shared by every verdict that gives them (a
// million instances in slow start would otherwise hold a million one-element slices).
// Capacity equals length, so an append copies: never write to a verdict's Reasons in place.
var (
	reasonsDraining  = []string{ReasonDraining}
	reasonsFlapping  = []string{ReasonFlapping}
	reasonsAdmitting = []string{ReasonAdmitting}
	reasonsRefused   = []string{ReasonAdmitting, ReasonProbeRefused} // never admitted, and nothing listens
	reasonsSlowStart = []string{ReasonSlowStart}
	reasonsDegraded  = []string{ReasonSelfReportedDegraded}
	reasonsNotReady  = []string{ReasonAdmitting, ReasonRuntimeNotReady}
	reasonsQueued    = []string{ReasonAdmitting, ReasonAdmissionQueued}
	reasonsEvacuated = []string{ReasonEvacuated}
	reasonsReturning = []string{ReasonReturning}
)

// verdictOf is Verdict for an instance record (nil: never declared).
func (e *Engine) verdictOf(in *instance, now time.Time) Verdict {
	if in != nil {
		e.advance(in, now)
	}
	if in == nil || !in.present {
		return Verdict{State: apiv1.EligibilityAbsent, Reasons: []string{}}
	}
	switch {
	case in.draining:
		return Verdict{State: apiv1.EligibilityDraining, Reasons: reasonsDraining}
	case in.quarantined(now):
		return Verdict{State: apiv1.EligibilityQuarantined, Reasons: reasonsFlapping}
	case !in.admitted && in.notReady:
		return Verdict{State: apiv1.EligibilityWithdrawn, Reasons: reasonsNotReady}
	case !in.admitted && in.refusedUnadmitted():
		return Verdict{State: apiv1.EligibilityWithdrawn, Reasons: reasonsRefused}
	case !in.admitted && in.admitQueued:
		return Verdict{State: apiv1.EligibilityUnknown, Reasons: reasonsQueued}
	case !in.admitted:
		return Verdict{State: apiv1.EligibilityUnknown, Reasons: reasonsAdmitting}
	case len(in.causes) > 0:
		reasons := make([]string, 0, len(in.causes))
		for c := range in.causes {
			reasons = append(reasons, c)
		}
		sort.Strings(reasons)
		return Verdict{State: apiv1.EligibilityWithdrawn, Reasons: reasons}
	}
	var cap int // the weight of the return step, when on the way back from an evacuation
	if len(e.evacuations) > 0 {
		var evacuated bool
		if evacuated, cap = e.evacuated(in, now); evacuated {
			return Verdict{State: apiv1.EligibilityEvacuated, Reasons: reasonsEvacuated}
		}
	}
	v := Verdict{State: apiv1.EligibilityServing, Weight: 100, Reasons: []string{}}
	if elapsed := sinceNanos(now, in.rotationSince); elapsed < e.cfg.SlowStart {
		v = Verdict{State: apiv1.EligibilitySlowStart, Weight: e.rampWeight(elapsed), Reasons: reasonsSlowStart}
	}
	switch slow := in.latencyDegraded(now); {
	case slow && in.degraded:
		v.State, v.Weight, v.Reasons = apiv1.EligibilityDegraded, min(v.Weight, e.cfg.DegradedWeight), reasonsLatencyAndDegraded
	case slow:
		v.State, v.Weight, v.Reasons = apiv1.EligibilityDegraded, min(v.Weight, e.cfg.DegradedWeight), reasonsLatency
	case in.degraded:
		v.State, v.Weight, v.Reasons = apiv1.EligibilityDegraded, min(v.Weight, e.cfg.DegradedWeight), reasonsDegraded
	}
	if cap > 0 {
		v.State, v.Weight, v.Reasons = apiv1.EligibilityReturning, min(v.Weight, cap), reasonsReturning
	}
	if e.silent(in, now) {
		v.Reasons = append(v.Reasons, ReasonSilent)
	}
	return v
}

// Tick applies what is due by now registry-wide: self-preservation enters or ends, then
// expired leases are evicted unless the mode holds.
func (e *Engine) Tick(now time.Time) {
	if !e.started {
		e.started, e.start = true, now
	}
	e.ticked = now
	e.judgeOutliers(now)
	e.endCohortFlaps(now)
	if len(e.admitQ) > 0 {
		e.admitQueued(now)
	}
	if e.cfg.ExternalLeases {
		e.renewals.reset()
		e.ratio, e.decision = 1, SelfPreservationDecision{Ratio: 1}
		return
	}
	window := e.cfg.LeaseTTL
	e.renewals.dropThrough(now.Add(-window))
	// Each instance that has renewed at least once is expected to renew once per heartbeat
	// interval over the part of the window it has been registered for: a fleet that never
	// heartbeats, or a burst of fresh registrations, is no sign that renewals are lost.
	for e.young.due(now.Add(-window)) {
		at, inc := e.young.pop()
		if in := inc.in; youngHolds(at, inc) {
			e.untrack(in)
			in.live, e.oldLive = liveOld, e.oldLive+1
		}
	}
	e.rebase(now.Add(-window))
	live := e.oldLive + e.youngLive
	// young instances owe (now - registeredAt) each: youngLive × (now - base) - youngSum
	owed := int64(e.youngLive)*int64(now.Sub(e.base)) - e.youngSum
	expected := (float64(e.oldLive)*float64(window) + float64(owed)) / float64(e.cfg.HeartbeatInterval)
	ratio := 1.0
	if expected > 0 {
		ratio = float64(e.renewals.len()) / expected
	}
	e.ratio = ratio
	d := SelfPreservationDecision{Received: e.renewals.len(), Expected: expected, Live: live, Ratio: ratio}
	switch {
	case e.sp && ratio >= e.cfg.SelfPreservationExit:
		e.sp, d.Reason = false, SelfPreservationRenewalsRecovered
	case e.sp && now.Sub(e.spSince) >= e.cfg.SelfPreservationMax:
		e.sp, e.spBlock, d.Reason = false, true, SelfPreservationBoundReached
	case !e.sp && e.spBlock && ratio >= e.cfg.SelfPreservationExit:
		e.spBlock = false
	case !e.sp && !e.spBlock && ratio < e.cfg.SelfPreservationEnter && live >= e.cfg.SelfPreservationMinInstances &&
		now.Sub(e.start) >= window:
		e.sp, e.spSince, d.Reason = true, now, SelfPreservationRenewalsLow
	}
	e.decision = d
	if e.sp {
		return
	}
	// Leases end: only the incarnations whose earliest possible end has come are looked at;
	// one renewed since goes back in the queue at its new end.
	for e.leases.due(now) {
		at, inc := e.leases.pop()
		in := inc.in
		if !leaseHolds(at, inc) {
			continue // stale: a later incarnation, forgotten, or no lease to end any more
		}
		if e.expired(in, now) {
			in.present = false
			e.untrack(in)
			continue
		}
		e.leases.pushAt(in.lastRenewal+int64(e.cfg.LeaseTTL), in, len(e.instances), leaseHolds)
	}
}

// track counts in among the instances expected to renew, as of at (it has just renewed).
func (e *Engine) track(in *instance, at time.Time) {
	if !in.present || in.draining || in.gone || !in.renewed || in.live != notCounted {
		return
	}
	if e.base.IsZero() {
		e.base = at.Add(-e.cfg.LeaseTTL)
	}
	if sinceNanos(at, in.registeredAt) >= e.cfg.LeaseTTL {
		in.live, e.oldLive = liveOld, e.oldLive+1
		return
	}
	in.live, e.youngLive = liveYoung, e.youngLive+1
	e.youngSum += in.registeredAt - e.base.UnixNano()
	e.young.pushAt(in.registeredAt, in, e.youngLive, youngHolds)
}

// untrack takes in out of the instances expected to renew (its queue entry, if any, turns
// stale).
func (e *Engine) untrack(in *instance) {
	switch in.live {
	case liveOld:
		e.oldLive--
	case liveYoung:
		e.youngLive--
		e.youngSum -= in.registeredAt - e.base.UnixNano()
	}
	in.live = notCounted
}

// rebase moves the origin of the young instances' offsets to b, so that the sum stays small
// however long the engine runs.
func (e *Engine) rebase(b time.Time) {
	if !e.base.IsZero() {
		e.youngSum -= int64(e.youngLive) * int64(b.Sub(e.base))
	}
	e.base = b
}

// SelfPreservation reports whether lease expiry is suspended (as of the last Tick).
func (e *Engine) SelfPreservation() bool { return e.sp }

// Ejections returns how many passive ejections the engine has made.
func (e *Engine) Ejections() int { return e.ejected }

// RenewalRatio returns the renewals received in the last window over those expected, as of
// the last Tick (1 when none are expected).
func (e *Engine) RenewalRatio() float64 { return e.ratio }

// SelfPreservationDecision returns what the last Tick counted and decided.
func (e *Engine) SelfPreservationDecision() SelfPreservationDecision { return e.decision }

// Reason is one reason of a verdict with the evidence behind it (the wire type).
type Reason = apiv1.EligibilityReason
