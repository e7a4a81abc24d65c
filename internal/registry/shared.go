package registry

import (
	"context"
	"log/slog"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// SharedVerdict is the elected replica's verdict on one incarnation, as a store that spans
// replicas shares it: the other replicas follow it (only the elected replica probes).
type SharedVerdict struct {
	InstanceID string `json:"instance_id"`
	Generation int64  `json:"generation"`
	State      string `json:"state"`
	// Weight is the weight the elected replica published. During slow start it is 0 and
	// Since is when the ramp began: every replica weighs it, to the tenth, at the elected
	// replica's ramp clock, which the store shares too, so that every replica answers the
	// same ramp at the same revision. (Earlier versions published each tenth here; such a
	// weight is still answered as published.)
	Weight  int       `json:"weight"`
	Since   time.Time `json:"since"`
	Reasons []string  `json:"reasons"`
}

// VerdictSharer is a Store that shares verdicts between replicas (the etcd store).
// OnVerdict is called from the store's watch for every verdict another replica published,
// OnRampClock for every ramp clock; a store calls them before its revision moves to the
// write's, so that answers at that revision hold what they brought. OnRampClock's function
// returns the instances whose answers the clock moved: the store tells those alone at the
// clock's revision (health.Monitor.SetRampClock).
// Gateways report outcomes to any replica: ForwardOutcomes hands them to the elected one,
// whose store calls OnOutcomes with them. It tells what the other replicas changed
// (ChangeNotifier), so that its eligibility monitor holds their instances.
type VerdictSharer interface {
	ChangeNotifier
	PublishVerdicts(ctx context.Context, vs []SharedVerdict) error
	SharedVerdict(id string) (SharedVerdict, bool)
	OnVerdict(func(SharedVerdict))
	PublishRampClock(ctx context.Context, t time.Time) error
	RampClock() time.Time
	OnRampClock(func(time.Time) (moved []string))
	ForwardOutcomes(ctx context.Context, req *apiv1.OutcomesRequest) error
	OnOutcomes(func(*apiv1.OutcomesRequest))
}

// shareVerdicts runs on every sweep, and after a change of verdict, with a store that shares
// verdicts. The elected replica publishes the verdicts that changed since it last looked (all
// of them once, when it is elected or after a failed publication) that the others do not
// answer already (health.Judgment.Follows: from what the store holds or, while it holds
// nothing on the incarnation, from the record), then its ramp clock when a slow start entered
// its next tenth or ended (and with the whole fleet); the others follow the published ones.
func (r *Registry) shareVerdicts(ctx context.Context, vs VerdictSharer) {
	m := r.cfg.Eligibility
	leader := r.Leader()
	m.SetFollowing(!leader)
	changed := m.TakeChanged() // taken either way, so that it never grows on a follower
	if !leader {
		r.shareAll.Store(true) // when elected, publish every verdict, and the ramp clock, once
		return
	}
	all := r.shareAll.Swap(false)
	recs := make([]*Record, 0, len(changed))
	if all {
		recs = r.store.Records()
	} else {
		for _, id := range changed {
			if rec, ok := r.store.Get(id); ok {
				recs = append(recs, rec)
			}
		}
	}
	var out []SharedVerdict
	for _, rec := range recs {
		j, ok := m.Judged(rec.InstanceID)
		if !ok || j.Generation != rec.Generation {
			continue // the monitor holds an earlier incarnation: the next sync declares this one
		}
		cur, held := vs.SharedVerdict(rec.InstanceID)
		if held = held && cur.Generation == rec.Generation; held && j.Follows(cur.followed()) || !held && j.Derived {
			continue // followers answer it from what the store holds, or, while it holds nothing, from the record
		}
		out = append(out, SharedVerdict{InstanceID: rec.InstanceID, Generation: rec.Generation, State: j.State, Weight: j.Weight, Since: j.Since, Reasons: j.Reasons})
	}
	if len(out) > 0 {
		if err := r.write(ctx, func(ctx context.Context) error { return vs.PublishVerdicts(ctx, out) }); err != nil {
			r.shareAll.Store(true)
			r.cfg.Logger.Warn("publishing verdicts to the other replicas failed; retrying at the next sweep", slog.Any("error", err))
			return
		}
	}
	// After the verdicts, so that a follower holds a slow start before the clock that weighs it.
	if at, moved := m.TakeRampMoved(); moved || all {
		if !moved {
			at = r.cfg.Now() // just elected: the previous elected replica's clock may be later than this monitor's last verdict
		}
		if err := r.write(ctx, func(ctx context.Context) error { return vs.PublishRampClock(ctx, at) }); err != nil {
			r.shareAll.Store(true)
			r.cfg.Logger.Warn("publishing the ramp clock to the other replicas failed; retrying at the next sweep", slog.Any("error", err))
		}
	}
}

// forwarded applies outcomes another replica received, on the elected replica.
func (r *Registry) forwarded(req *apiv1.OutcomesRequest) {
	if !r.Leader() {
		return
	}
	if _, err := r.applyOutcomes(req); err != nil {
		r.cfg.Logger.Warn("forwarded outcomes refused", slog.String("gateway_id", req.GatewayID), slog.Any("error", err))
	}
}

// follow hands a verdict another replica published to the monitor.
func (r *Registry) follow(v SharedVerdict) {
	if rec, ok := r.store.Get(v.InstanceID); ok && rec.Generation == v.Generation {
		r.cfg.Eligibility.Follow(v.followed(), r.cfg.Now())
	}
}

// followed is v as the monitor follows it.
func (v SharedVerdict) followed() health.Followed {
	return health.Followed{ID: v.InstanceID, Generation: v.Generation, State: v.State, Weight: v.Weight, Since: v.Since, Reasons: v.Reasons}
}
