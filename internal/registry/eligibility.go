package registry

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/prober"
)

// capabilityIDs returns the ids of rec's capabilities, in order: its interned list's, shared
// by the replicas of a service, when it has one.
func capabilityIDs(rec *Record) []string {
	if l := rec.capList; l != nil {
		return l.ids
	}
	ids := make([]string, len(rec.Capabilities)) // a record not built by newRecord or RecordFromInstance
	for i, c := range rec.Capabilities {
		ids[i] = c.CapabilityID
	}
	return ids
}

// healthInstance is what the eligibility engine needs to know of a record.
func healthInstance(rec *Record) health.Instance {
	in := health.Instance{ID: rec.InstanceID, Zone: rec.Zone, Service: rec.ServiceName, Routed: rec.Routed(), Capabilities: capabilityIDs(rec)}
	if in.Probe = rec.Probed(); in.Probe {
		if m := rec.Manifest; m.Health.UnhealthyAfter != nil {
			if n, ok := m.Health.UnhealthyAfter.Int64(); ok {
				in.UnhealthyAfter = int(n)
			}
		}
	}
	return in
}

// revision is the revision discovery answers carry: the store's plus the eligibility
// monitor's, so that a change of either is a new revision (both only grow). With a store that
// shares verdicts between replicas (etcd) it is the store's alone — etcd's revision of the
// last change the replica applied, verdicts included, since the elected replica writes them
// through etcd — so that every replica of one epoch numbers the same history alike.
func (r *Registry) revision() int64 {
	rev, _, _ := r.watch()
	return rev
}

// watch returns the revision and the channels closed when the store's, or the monitor's,
// part of it next changes (the second is nil without the engine, or with a shared store).
func (r *Registry) watch() (int64, <-chan struct{}, <-chan struct{}) {
	rev, stored := r.store.Watch()
	var judged <-chan struct{}
	if _, shared := r.store.(VerdictSharer); shared {
		return rev, stored, nil
	}
	if m := r.cfg.Eligibility; m != nil {
		var mrev int64
		mrev, judged = m.Watch()
		rev += mrev
	}
	return rev, stored, judged
}

// syncEligibility hands the fleet to the monitor: records registered or renewed elsewhere
// (another replica, a snapshot) are declared, removed ones forgotten, and time applied. The
// registry's own calls feed the monitor directly; the whole fleet is walked only after a
// start or a restore, or when a store other replicas write to read its whole view anew, and
// otherwise the monitor gets the instances such a store said it changed since the last sweep.
func (r *Registry) syncEligibility(now time.Time) {
	walk := r.reconcile.Swap(false)
	changed := r.changes.take() // before the records are read: a change told after them comes at the next sweep
	vs, shared := r.store.(VerdictSharer)
	var recs []*Record
	switch {
	case walk:
		recs = r.store.Records()
		r.cfg.Eligibility.Sync(now, recordFleet{recs: recs, ttl: r.cfg.LeaseTTL})
	case len(changed) > 0:
		var gone []string
		for id := range changed {
			if rec, ok := r.store.Get(id); ok {
				recs = append(recs, rec)
			} else {
				gone = append(gone, id)
			}
		}
		r.cfg.Eligibility.SyncChanged(now, recordFleet{recs: recs, ttl: r.cfg.LeaseTTL}, gone)
	default:
		r.cfg.Eligibility.Sync(now, nil)
		return
	}
	if shared {
		r.followShared(vs, recs, now)
	}
}

// followShared follows the verdicts already published on recs (a replica that starts, or
// resyncs, after them; an instance another replica registered, whose verdict may have come
// before the monitor held it) at once, not from the elected replica's next change, weighed at
// the ramp clock already published.
func (r *Registry) followShared(vs VerdictSharer, recs []*Record, now time.Time) {
	r.cfg.Eligibility.SetRampClock(vs.RampClock(), now)
	for _, rec := range recs {
		if v, ok := vs.SharedVerdict(rec.InstanceID); ok && v.Generation == rec.Generation {
			r.follow(v)
		}
	}
}

// storeChanges is the set of instances a ChangeNotifier store changed since the last sweep.
type storeChanges struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// add notes that the store changed instance id.
func (c *storeChanges) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = make(map[string]struct{})
	}
	c.ids[id] = struct{}{}
}

// take returns the instances noted since the last take, and forgets them.
func (c *storeChanges) take() map[string]struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.ids
	c.ids = nil
	return ids
}

// recordFleet is the store's records as the monitor's Fleet.
type recordFleet struct {
	recs []*Record
	ttl  time.Duration
}

func (f recordFleet) Len() int { return len(f.recs) }

func (f recordFleet) Member(i int) health.Member {
	rec := f.recs[i]
	return health.Member{Instance: health.Instance{ID: rec.InstanceID}, Generation: rec.Generation, RegisteredAt: rec.RegisteredAt,
		LastRenewal: rec.LeaseExpiresAt().Add(-f.ttl), Health: rec.Health()}
}

func (f recordFleet) Instance(i int) health.Instance { return healthInstance(f.recs[i]) }

// judge fills in the eligibility of entries and drops those out of rotation, unless their
// (capability, zone) is in panic: then all are kept, at weight 100, marked panic. With all,
// the out-of-rotation ones are kept too, with their verdicts (a consumer judging its own
// pool); draining and absent ones never are.
//
// With collect it also returns the incarnations dropped as refused before admission
// (health.RefusedBeforeAdmission), an entry each (the same incarnation may come once per
// capability): an answer during the warm-up lists them as removed.
func (r *Registry) judge(es []Entry, all, collect bool) (out []Entry, refused []apiv1.Removal) {
	m := r.cfg.Eligibility
	if m == nil {
		return es, nil
	}
	out = es[:0]
	for len(es) > 0 {
		chunk := es[:min(len(es), judgeChunk)]
		es = es[len(chunk):]
		out, refused = judgeChunkOf(m, chunk, out, all, collect, refused)
	}
	return out, refused
}

// judgeChunk is how many entries are judged under one read lock of the monitor: a large
// answer takes the lock a few hundred entries at a time, so evidence is never held up long.
const judgeChunk = 256

func judgeChunkOf(m Eligibility, es, out []Entry, all, collect bool, refused []apiv1.Removal) ([]Entry, []apiv1.Removal) {
	// one variable for the closure to write: a discovery answer's only allocation here
	acc := struct {
		out     []Entry
		refused []apiv1.Removal
	}{out, refused}
	m.Read(func(rd health.Reader) {
		var lastCap, lastZone string
		var lastPanic, lastAll, known bool
		for _, e := range es {
			state, weight := verdictOf(rd, e.Record)
			e.Eligibility, e.Weight = state, weight
			if state == apiv1.EligibilityWithdrawn && rd.RefusedBeforeAdmission(e.Record.judged.Load(), e.Record.InstanceID, e.Record.Generation) {
				if collect {
					acc.refused = append(acc.refused, apiv1.Removal{InstanceID: e.Record.InstanceID, Generation: e.Record.Generation})
				}
				continue // never admitted, and nothing listens: answered nowhere, as if gone
			}
			// answers come sorted by capability: one panic lookup per run of a group
			if c, z := e.Capability().CapabilityID, e.Record.Zone; !known || c != lastCap || z != lastZone {
				lastCap, lastZone, lastPanic, known = c, z, rd.Panic(c, z), true
				lastAll = lastPanic && rd.PanicTakesAll(c, z)
			}
			// A panic answer leaves out the incarnations never admitted, unless no member of
			// the group ever was: a surge of new ones takes no full share before a probe.
			if lastPanic && !lastAll && state == apiv1.EligibilityUnknown &&
				rd.NeverAdmitted(e.Record.judged.Load(), e.Record.InstanceID, e.Record.Generation, e.Record.Probed(), e.Record.RegisteredAt) {
				if all {
					acc.out = append(acc.out, e)
				}
				continue
			}
			if state == apiv1.EligibilityWithdrawn && rd.Forced(e.Record.judged.Load(), e.Record.InstanceID, e.Record.Generation) {
				// an operator forced it out past OVERRIDE_UNSAFE: no member of any pool, not
				// even in panic; said to those who judge their own pools
				if all {
					e.Excluded = true
					acc.out = append(acc.out, e)
				}
				continue
			}
			if lastPanic {
				switch state {
				case apiv1.EligibilityDraining, apiv1.EligibilityAbsent:
					continue
				case apiv1.EligibilityEvacuated: // no member of its group: never served in panic
					if all {
						acc.out = append(acc.out, e)
					}
					continue
				}
				e.Weight, e.Panic = 100, true
			} else if !apiv1.InRotation(state) && (!all || state == apiv1.EligibilityDraining || state == apiv1.EligibilityAbsent) {
				continue
			}
			acc.out = append(acc.out, e)
		}
	})
	return acc.out, acc.refused
}

// verdictOf reads the published verdict on rec: through the monitor's handle when this
// replica registered it, else by id (registered through another replica, or restored). An
// incarnation the monitor does not hold yet (registered a moment ago elsewhere; the next
// sync declares it) has its first verdict, derived from the record — the one the monitor
// publishes for it on a replica that follows, so that the answer at this revision stays.
func verdictOf(rd health.Reader, rec *Record) (state string, weight int) {
	if state, weight, ok := rd.VerdictOf(rec.judged.Load()); ok {
		return state, weight
	}
	if state, weight, ok := rd.VerdictAt(rec.InstanceID, rec.Generation); ok {
		return state, weight
	}
	return rd.First(rec.ServiceName, rec.Probed(), rec.RegisteredAt)
}

// eligibilityOf returns the published state and weight of rec, and whether one of its
// (capability, zone) groups is in panic (serving at 100 when the registry runs without the
// engine).
func (r *Registry) eligibilityOf(rec *Record) (state string, weight int, inPanic bool) {
	state, weight, inPanic, _ = r.eligibilityExcluded(rec)
	return state, weight, inPanic
}

// eligibilityExcluded is eligibilityOf, and whether an operator forced rec out past
// OVERRIDE_UNSAFE (then it is in no panic: no pool uses it).
func (r *Registry) eligibilityExcluded(rec *Record) (state string, weight int, inPanic, excluded bool) {
	m := r.cfg.Eligibility
	if m == nil {
		return apiv1.EligibilityServing, 100, false, false
	}
	m.Read(func(rd health.Reader) {
		state, weight = verdictOf(rd, rec)
		if state == apiv1.EligibilityWithdrawn && rd.Forced(rec.judged.Load(), rec.InstanceID, rec.Generation) {
			excluded = true
			return
		}
		for _, c := range rec.Capabilities {
			inPanic = inPanic || rd.Panic(c.CapabilityID, rec.Zone)
		}
	})
	return state, weight, inPanic, excluded
}

// ErrNoEligibility: the registry runs without the eligibility engine.
var ErrNoEligibility = fmt.Errorf("the registry runs without the eligibility engine")

// Explain returns the eligibility of one instance with its reasons, evidence and last
// transitions.
func (r *Registry) Explain(id string) (health.Explanation, error) {
	m := r.cfg.Eligibility
	if m == nil {
		return health.Explanation{}, ErrNoEligibility
	}
	ex, ok := m.Explain(id, r.cfg.Now())
	if !ok {
		return health.Explanation{}, fmt.Errorf("instance %q: %w", id, ErrInstanceNotFound)
	}
	return ex, nil
}

// Outcomes applies a gateway's passive evidence; outcomes of incarnations the registry no
// longer holds are ignored.
func (r *Registry) Outcomes(ctx context.Context, req *apiv1.OutcomesRequest) (*apiv1.OutcomesResponse, error) {
	if err := req.Validate(); err != nil {
		r.metrics.outcomes.WithLabelValues(outcomeInvalid).Add(float64(max(1, len(req.Outcomes))))
		return nil, err
	}
	if r.cfg.Eligibility == nil {
		return nil, ErrNoEligibility
	}
	if id := CallerFrom(ctx).Identity; id != "" {
		req.GatewayID = id // the reporter is the caller's authenticated identity; gateway_id names it in open mode only
	}
	if r.outcomeRate != nil {
		if ok, wait := r.outcomeRate.Allow(req.GatewayID); !ok {
			r.metrics.outcomes.WithLabelValues(outcomeRateLimited).Add(float64(len(req.Outcomes)))
			return nil, apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
				"reporter %q is over its outcome rate (%g batches a second, %d at once; --outcome-rate, --outcome-burst): report once a window, batched",
				req.GatewayID, r.cfg.OutcomeRate, r.cfg.OutcomeBurst).WithRetryAfter(wait)
		}
	}
	if vs, ok := r.store.(VerdictSharer); ok && !r.Leader() {
		// The elected replica judges: hand the evidence over, and say what it will apply.
		out := &apiv1.OutcomesResponse{}
		for _, o := range req.Outcomes {
			rec, ok := r.store.Get(o.InstanceID)
			r.countOutcome(out, rec, ok, o.Generation)
		}
		if err := r.write(ctx, func(ctx context.Context) error { return vs.ForwardOutcomes(ctx, req) }); err != nil {
			return nil, fmt.Errorf("forward outcomes to the elected replica: %w", err)
		}
		return out, nil
	}
	return r.applyOutcomes(req)
}

// applyOutcomes applies outcomes to this replica's engine.
func (r *Registry) applyOutcomes(req *apiv1.OutcomesRequest) (*apiv1.OutcomesResponse, error) {
	m := r.cfg.Eligibility
	now := r.cfg.Now()
	out := &apiv1.OutcomesResponse{}
	for _, o := range req.Outcomes {
		rec, ok := r.store.Get(o.InstanceID)
		if !r.countOutcome(out, rec, ok, o.Generation) {
			continue
		}
		if err := m.Observe(health.Event{At: now, ID: o.InstanceID, Kind: health.KindOutcome, OK: o.OK, Errors: o.Errors, ConnectFailures: o.ConnectFailures,
			LatencyMsP99: o.LatencyMsP99, Reporter: req.GatewayID}); err != nil {
			return nil, fmt.Errorf("outcome of %s: %w", o.InstanceID, err)
		}
		if o.ConnectFailures > 0 && r.cfg.Suspect != nil {
			r.cfg.Suspect(o.InstanceID)
		}
	}
	return out, nil
}

// Results of an outcome (meshflows_registry_outcomes_total).
const (
	outcomeAccepted    = "accepted"
	outcomeUnknown     = "unknown_instance"
	outcomeStale       = "stale_generation"
	outcomeInvalid     = "invalid"
	outcomeRateLimited = "rate_limited"
)

// countOutcome counts an outcome about rec (found: ok) at generation in out and the metric,
// and reports whether it applies.
func (r *Registry) countOutcome(out *apiv1.OutcomesResponse, rec *Record, ok bool, generation int64) bool {
	result := outcomeAccepted
	switch {
	case !ok:
		result = outcomeUnknown
	case rec.Generation != generation:
		result = outcomeStale
	}
	r.metrics.outcomes.WithLabelValues(result).Inc()
	if result != outcomeAccepted {
		out.Ignored++
		return false
	}
	out.Accepted++
	return true
}

// probeTargetCache is ProbeTargets' last answer and the store state it was built at.
type probeTargetCache struct {
	sync.Mutex
	epoch   string
	rev     int64
	targets []prober.Target
}

// ProbeTargets returns every instance whose manifest declares health, at its declared path
// and interval. The answer is built once per store revision; callers must not modify it.
func (r *Registry) ProbeTargets() []prober.Target {
	rev, _ := r.store.Watch()
	epoch := r.store.Epoch().ID
	pt := &r.probeTargets
	pt.Lock()
	defer pt.Unlock()
	if pt.targets != nil && pt.rev == rev && pt.epoch == epoch {
		return pt.targets
	}
	out := []prober.Target{} // not nil: the answer at this revision is known
	for _, rec := range r.store.ProbedRecords() {
		m := rec.Manifest
		iv, err := time.ParseDuration(m.Health.Interval)
		if err != nil || iv <= 0 {
			continue // validation refuses these at registration
		}
		out = append(out, prober.Target{ID: rec.InstanceID, Generation: rec.Generation,
			URL: strings.TrimSuffix(rec.Endpoint, "/") + m.Health.Path, Interval: iv, Service: rec.ServiceName})
	}
	pt.epoch, pt.rev, pt.targets = epoch, rev, out
	return out
}

// ReportProbe applies a probe result to the eligibility engine, when the incarnation probed
// is still the current one.
func (r *Registry) ReportProbe(res prober.Result) {
	m := r.cfg.Eligibility
	if m == nil {
		return
	}
	if rec, ok := r.store.Get(res.Target.ID); !ok || rec.Generation != res.Target.Generation {
		return
	}
	if err := m.Observe(health.Event{At: res.At, Observed: res.Observed, ID: res.Target.ID, Kind: health.KindProbe, Result: res.Result, Impostor: res.Impostor}); err != nil {
		r.cfg.Logger.Error("probe result refused", slog.String("instance_id", res.Target.ID), slog.Any("error", err))
	}
}

// Leader reports whether this replica is the one that runs fleet-wide work (probes,
// snapshots): always with the memory store, the elected replica with etcd.
func (r *Registry) Leader() bool {
	if l, ok := r.store.(LeaderElector); ok {
		return l.Leader()
	}
	return true
}

// Timeline returns the last 24 hours of every capability's health.
func (r *Registry) Timeline() (apiv1.TimelineResponse, error) {
	if r.cfg.Eligibility == nil {
		return apiv1.TimelineResponse{}, ErrNoEligibility
	}
	return r.cfg.Eligibility.Timeline(), nil
}

// Team returns the owner told of an instance's defects: the team its registration named, or
// the identity that registered it; with its service and zone ("" each when unknown).
func (r *Registry) Team(id string) (owner, service, zone string) {
	if rec, ok := r.store.Get(id); ok {
		return cmp.Or(rec.Team, rec.Owner), rec.ServiceName, rec.Zone
	}
	return "", "", ""
}

// Owner returns the identity that registered an instance ("" when unknown or in open mode).
func (r *Registry) Owner(id string) string {
	if rec, ok := r.store.Get(id); ok {
		return rec.Owner
	}
	return ""
}

// refusedBeforeAdmission returns, of recs, the incarnations never admitted whose probes were
// refused (health.RefusedBeforeAdmission) as removals: an answer leaves them out, and while
// the registry warms up it lists them as removed, so that a view merged from what it knew
// before the restart drops them too.
func (r *Registry) refusedBeforeAdmission(recs []*Record) []apiv1.Removal {
	m := r.cfg.Eligibility
	if m == nil || len(recs) == 0 {
		return nil
	}
	var out []apiv1.Removal
	m.Read(func(rd health.Reader) {
		for _, rec := range recs {
			if rd.RefusedBeforeAdmission(rec.judged.Load(), rec.InstanceID, rec.Generation) {
				out = append(out, apiv1.Removal{InstanceID: rec.InstanceID, Generation: rec.Generation})
			}
		}
	})
	return out
}

// withRemovals is removed with more added, in instance order, each instance once (the
// higher generation).
func withRemovals(removed, more []apiv1.Removal) []apiv1.Removal {
	if len(more) == 0 {
		return removed
	}
	out := append(slices.Clone(removed), more...)
	slices.SortFunc(out, func(a, b apiv1.Removal) int {
		return cmp.Or(strings.Compare(a.InstanceID, b.InstanceID), -cmp.Compare(a.Generation, b.Generation))
	})
	return slices.CompactFunc(out, func(a, b apiv1.Removal) bool { return a.InstanceID == b.InstanceID })
}
