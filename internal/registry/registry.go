package registry

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/endpoint"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/reconnect"
)

// verdictPublishDelay gathers a burst of verdict changes into one publication.
const verdictPublishDelay = 50 * time.Millisecond

// Defaults of Config.
const (
	DefaultLeaseTTL          = 90 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultSweepInterval     = time.Second
	DefaultGatewayTTL        = 30 * time.Second
	DefaultStoreTimeout      = 5 * time.Second
	// DefaultSummaryInterval spaces the INFO lines that sum up registrations, heartbeats,
	// deregistrations and evictions: each has its own line at DEBUG only (an evacuation's
	// 667 deregistrations a second logged 3 MB in 30 s at INFO).
	DefaultSummaryInterval = 10 * time.Second
	// DefaultOutcomeRate and DefaultOutcomeBurst bound each reporter's outcome batches: a
	// gateway sends one a window (10 s) in batches of at most 1,000 instances: this takes
	// 200,000 instances a window from one reporter, 20,000 outcomes a second sustained.
	DefaultOutcomeRate  = 20.0
	DefaultOutcomeBurst = 100
)

// Config configures a Registry. The zero value gets the defaults.
type Config struct {
	// Region names the region the registry serves (--region): every instance registered
	// with it belongs to it, and every answer says so. Empty: no region.
	Region string
	// LeaseTTL is how long a lease lives without a heartbeat (default 90 s); it is also the
	// warm-up window after an empty start.
	LeaseTTL time.Duration
	// HeartbeatInterval is what providers are told to heartbeat at (default 30 s, or a third
	// of a shorter LeaseTTL); it must be shorter than LeaseTTL and whole seconds.
	HeartbeatInterval time.Duration
	// SweepInterval is how often Run evicts expired leases (default 1 s).
	SweepInterval time.Duration
	// SnapshotDir, when set with SnapshotInterval > 0, makes Run write a snapshot there on
	// that interval; WriteSnapshot uses it too.
	SnapshotDir      string
	SnapshotInterval time.Duration
	// SnapshotKeep is how many snapshot files WriteSnapshot keeps in SnapshotDir, the newest
	// (default 5).
	SnapshotKeep int
	// StoreTimeout bounds every write to the store (default 5 s): past it the write fails
	// with ErrStoreUnavailable instead of holding the caller while the store is away.
	StoreTimeout time.Duration
	// GatewayTTL is how long a gateway counts as live after its last acknowledgement
	// (default 30 s; gateways acknowledge every 10 s). A withdrawal is acknowledged only once
	// the registry has run this long: before, a live gateway may not have been heard from.
	GatewayTTL time.Duration
	// SummaryInterval is how often Run logs one INFO line of activity (registrations,
	// heartbeats, deregistrations, evictions) when there was some (default
	// DefaultSummaryInterval); each registration, deregistration and eviction has its own line
	// only at DEBUG.
	SummaryInterval time.Duration
	// Now is the clock (default time.Now). Tests inject a fake one.
	Now func() time.Time
	// Logger receives register, deregister and eviction events; nil is silent.
	Logger *slog.Logger
	// Registerer receives the registry's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Journal, when set, records every registration, re-registration, deregistration,
	// eviction and snapshot (docs/console.md).
	Journal *journal.Journal
	// Eligibility, when set, judges which instances are in rotation (docs/reference/eligibility.md): the
	// registry feeds it registrations, heartbeats and deregistrations, syncs it on every
	// sweep, filters discovery by its verdicts and stops evicting under self-preservation.
	// Nil: every instance with a live lease is serving at weight 100.
	Eligibility Eligibility
	// Endpoints is the address policy of registered endpoints: link-local and cloud metadata
	// addresses are refused unless it allows their range (--allow-endpoint-cidr).
	Endpoints endpoint.Policy
	// OutcomeRate and OutcomeBurst bound the outcome batches (POST /v1/outcomes) of each
	// reporter: defaults DefaultOutcomeRate a second, DefaultOutcomeBurst at once; a negative
	// rate sets no bound.
	OutcomeRate  float64
	OutcomeBurst int
	// ReconnectRate and ReconnectBurst bound the registrations accepted a second (a token
	// bucket): the excess is answered 429 with a Retry-After spread over the backlog.
	// Heartbeats are never shed. Zero or negative: no bound (meshflows registry sets
	// DefaultReconnectRate).
	ReconnectRate  float64
	ReconnectBurst int
	// Suspect, when set, hears the instances a consumer reported connect failures to, as
	// they are applied: the prober re-probes them at once (a suspect is confirmed or cleared
	// within seconds, whatever its declared interval).
	Suspect func(instanceID string)
}

// Eligibility is what the registry asks of the eligibility monitor (a *health.Monitor):
// evidence in, verdicts out while it answers, and the verdicts shared between replicas.
type Eligibility interface {
	// Evidence.
	Register(in health.Instance, generation int64, at time.Time) *health.Handle
	Observe(ev health.Event) error
	ObserveVia(h *health.Handle, ev health.Event) error
	Forget(id string, at time.Time)
	Sync(now time.Time, fleet health.Fleet)
	SyncChanged(now time.Time, changed health.Fleet, gone []string)
	Advance(now time.Time)
	// Verdicts.
	Watch() (revision int64, changed <-chan struct{})
	Read(fn func(health.Reader))
	SelfPreservation() bool
	Explain(id string, now time.Time) (health.Explanation, bool)
	Timeline() apiv1.TimelineResponse
	// Replicas over a shared store: the elected one judges and publishes, the others follow.
	SetFollowing(following bool)
	Follow(f health.Followed, now time.Time)
	TakeChanged() []string
	TakeRampMoved() (at time.Time, moved bool)
	SetRampClock(t, now time.Time) (moved []string)
	Judged(id string) (health.Judgment, bool)
	// OnPublish has a function hear every move of the monitor's revision with the instances
	// whose verdict changed (health.Monitor.OnPublish): long polls wake by service from it.
	OnPublish(fn func(rev int64, touched []health.Instance, all bool))
	// Operator decisions (overrides, evacuations) and the evacuations that hold or return.
	Operate(ev health.Event) error
	OperateCount(ev health.Event) (int, error)
	Evacuations(now time.Time) []health.Evacuation
	Settings() health.Config
	ZoneOutliers(capability string, now time.Time) []string
	OutlierZones() []apiv1.ZoneOutlier
	OutcomeWindow(id string, now time.Time) *apiv1.OutcomeWindow
	Budgets(now time.Time) apiv1.Budgets
}

var _ Eligibility = (*health.Monitor)(nil)

// Registry is the registry core over a Store.
type Registry struct {
	counts   fleetCountsCache // fleetCounts, for the gauges of one scrape
	cfg      Config
	store    Store
	started  time.Time // when New ran: the registry knows every live gateway GatewayTTL later
	metrics  *metrics
	watchers atomic.Int64
	drain    drain
	// reconcile asks the next sweep to hand the whole fleet to the eligibility monitor;
	// changes holds the instances a store other replicas write to (ChangeNotifier) changed
	// since the last sweep.
	reconcile atomic.Bool
	changes   storeChanges
	// shareAll asks the next publication of verdicts to walk the whole fleet and to publish
	// the ramp clock.
	shareAll atomic.Bool
	// storeErr is the last error reaching the store while it is unreachable (nil: reachable).
	storeErr atomic.Pointer[error]
	// activity counts what happened since the last summary line.
	activity struct{ registered, heartbeats, deregistered, evicted atomic.Int64 }
	// probeTargets is the last ProbeTargets answer and the store state it was built at: the
	// prober asks ten times a second, and the fleet rarely changed in between.
	probeTargets probeTargetCache
	// topics wakes each long poll at a change of what it asked for (WaitOn); judgedNames is
	// the monitor's publications' scratch space (they come one at a time, under its lock).
	topics      *topics
	judgedNames struct{ services, capabilities []string }
	changes2    changeLog         // the instances each revision changed (ChangesOf)
	ops         operators         // evacuations and overrides (operator.go)
	outcomeRate *auth.RateLimiter // per reporter; nil: unbounded
	reconnect   *reconnect.Cap    // registrations a second; nil: unbounded
	arms        *reconnect.Cap    // watches that need a whole answer a second; nil: unbounded
	withdrawn   withdrawalLog     // recent publications carrying a withdrawal (propagation.go)
}

// New returns a Registry over store.
func New(store Store, cfg Config) (*Registry, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("registry config: %w", err)
	}
	r := &Registry{cfg: cfg, store: store, started: cfg.Now(), topics: newTopics()}
	if cfg.OutcomeRate > 0 {
		r.outcomeRate = auth.NewRateLimiter(cfg.OutcomeRate, cfg.OutcomeBurst, cfg.Now)
	}
	if cfg.ReconnectRate > 0 {
		r.reconnect = reconnect.New(cfg.ReconnectRate, cfg.ReconnectBurst)
		r.arms = reconnect.New(cfg.ReconnectRate, cfg.ReconnectBurst)
	}
	r.followTopics()
	r.reconcile.Store(true)
	r.shareAll.Store(true)
	if rn, ok := store.(RemovalNotifier); ok {
		rn.OnRemoved(func(rec *Record) {
			if st := r.State(); !st.Complete {
				r.drain.recordRemoval(rec, st.Epoch, r.cfg.Now())
			}
		})
	}
	if cn, ok := store.(ChangeNotifier); ok && cfg.Eligibility != nil {
		cn.OnChanged(func(id string) {
			if id == "" {
				r.reconcile.Store(true)
				return
			}
			r.changes.add(id)
		})
	}
	if os, ok := store.(OperatorSharer); ok && cfg.Eligibility != nil {
		os.OnOperators(func(b []byte) { r.operatorsShared(b, true) })
		if b := os.Operators(); b != nil {
			defer r.operatorsShared(b, false) // once the registry is built
		}
	}
	if vs, ok := store.(VerdictSharer); ok && cfg.Eligibility != nil {
		// A replica follows until its first sweep finds it elected (shareVerdicts): before,
		// it answered its own engine's ramp weights for what registered through it, where
		// the others answered the elected replica's, at the same revision.
		cfg.Eligibility.SetFollowing(true)
		vs.OnVerdict(r.follow)
		vs.OnRampClock(func(t time.Time) []string { return r.cfg.Eligibility.SetRampClock(t, r.cfg.Now()) })
		vs.OnOutcomes(r.forwarded)
	}
	m, err := newMetrics(cfg.Registerer, r)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

// Config returns the configuration in force, defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

// Store returns the store the registry runs on.
func (r *Registry) Store() Store { return r.store }

// State is what every discovery answer carries about the registry.
type State struct {
	Epoch    string
	Revision int64
	// Complete is false inside the warm-up window after an empty start.
	Complete bool
	// Region is the registry's region (Config.Region).
	Region string
}

// State returns the current epoch, revision and completeness.
func (r *Registry) State() State {
	return r.stateAt(r.revision())
}

func (r *Registry) stateAt(rev int64) State {
	ep := r.store.Epoch()
	complete := !ep.WarmUp || !r.cfg.Now().Before(ep.Start.Add(r.cfg.LeaseTTL))
	return State{Epoch: ep.ID, Revision: rev, Complete: complete, Region: r.cfg.Region}
}

// RegisterRefused counts a registration refused before it reached Register (the server's
// decoding, rate limit and checks), by reason (register_fail_total).
func (r *Registry) RegisterRefused(reason string) {
	r.metrics.registerFail.WithLabelValues(reason).Inc()
}

// Register validates req and stores it as the current incarnation of its instance.
func (r *Registry) Register(ctx context.Context, req *apiv1.RegisterRequest) (*apiv1.RegisterResponse, error) {
	if err := req.Validate(); err != nil {
		r.metrics.registerFail.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if msg := r.cfg.Endpoints.Problem(req.Endpoint); msg != "" {
		r.metrics.registerFail.WithLabelValues("invalid").Inc()
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "endpoint", Message: msg}})
	}
	if err := r.mayTouch(ctx, req.InstanceID, true); err != nil {
		r.metrics.registerFail.WithLabelValues("forbidden").Inc()
		return nil, err
	}
	now := r.cfg.Now()
	if ok, wait := r.reconnect.Admit(now); !ok {
		return nil, r.shedRegistration(wait)
	}
	rec := newRecord(req, now, r.cfg.LeaseTTL)
	rec.Owner = CallerFrom(ctx).Identity
	var prev *Record
	if r.cfg.Journal != nil {
		prev, _ = r.store.Get(req.InstanceID)
	}
	wctx, cancel := r.bound(ctx)
	err := r.store.Register(wctx, rec)
	cancel()
	if err := r.stored(ctx, err); err != nil {
		r.metrics.registerFail.WithLabelValues("store").Inc()
		return nil, fmt.Errorf("register %s: %w", req.InstanceID, err)
	}
	r.metrics.registerSuccess.Inc()
	if m := r.cfg.Eligibility; m != nil {
		h := m.Register(healthInstance(rec), rec.Generation, now)
		rec.judged.Store(h)
		if initial := rec.Health(); initial != apiv1.HealthOK { // it starts as a heartbeat would say
			if err := m.ObserveVia(h, health.Event{At: now, ID: rec.InstanceID, Kind: health.KindHeartbeat, Health: initial}); err != nil {
				return nil, fmt.Errorf("register %s: %w", req.InstanceID, err)
			}
		}
	}
	r.activity.registered.Add(1)
	r.journalRegistration(rec, prev, !r.State().Complete)
	if r.cfg.Logger.Enabled(ctx, slog.LevelDebug) { // one line per registration only at DEBUG: see logSummary
		r.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "register",
			slog.String("instance_id", rec.InstanceID), slog.String("service_name", rec.ServiceName),
			slog.Int64("generation", rec.Generation), slog.Int("capabilities", len(rec.Capabilities)))
	}
	return &apiv1.RegisterResponse{
		Accepted:                 true,
		LeaseTTLSeconds:          int64(r.cfg.LeaseTTL / time.Second),
		HeartbeatIntervalSeconds: int64(r.cfg.HeartbeatInterval / time.Second),
		Generation:               rec.Generation,
		RegistryEpoch:            r.store.Epoch().ID,
	}, nil
}

// Heartbeat extends the lease of the instance's current generation. The answer is a value: a
// heartbeat is the most frequent call, and a pointer cost it an allocation.
func (r *Registry) Heartbeat(ctx context.Context, id string, req *apiv1.HeartbeatRequest) (apiv1.HeartbeatResponse, error) {
	if err := req.Validate(); err != nil {
		r.metrics.heartbeatFail.WithLabelValues("invalid").Inc()
		return apiv1.HeartbeatResponse{}, err
	}
	reported := req.Health
	if reported == "" {
		reported = apiv1.HealthOK
	}
	if err := r.mayTouch(ctx, id, false); err != nil {
		r.metrics.heartbeatFail.WithLabelValues("forbidden").Inc()
		return apiv1.HeartbeatResponse{}, err
	}
	now := r.cfg.Now()
	expires := now.Add(r.cfg.LeaseTTL)
	wctx, cancel := r.bound(ctx)
	rec, err := r.store.Heartbeat(wctx, id, req.Generation, reported, expires)
	cancel()
	if err = r.stored(ctx, err); err != nil {
		r.metrics.heartbeatFail.WithLabelValues(failReason(err)).Inc()
		return apiv1.HeartbeatResponse{}, err
	}
	if m := r.cfg.Eligibility; m != nil {
		ev := health.Event{At: now, ID: id, Kind: health.KindHeartbeat, Health: reported}
		var err error
		if h := rec.judged.Load(); h != nil {
			err = m.ObserveVia(h, ev)
		} else {
			err = m.Observe(ev)
		}
		if err != nil {
			return apiv1.HeartbeatResponse{}, fmt.Errorf("heartbeat %s: %w", id, err)
		}
	}
	r.metrics.heartbeatSuccess.Inc()
	r.activity.heartbeats.Add(1)
	return apiv1.HeartbeatResponse{
		Generation:     rec.Generation,
		LeaseExpiresAt: expires.UTC(),
		RegistryEpoch:  r.store.Epoch().ID,
	}, nil
}

// write runs one store write bounded by StoreTimeout (see bound and stored).
func (r *Registry) write(ctx context.Context, op func(context.Context) error) error {
	wctx, cancel := r.bound(ctx)
	err := op(wctx)
	cancel()
	return r.stored(ctx, err)
}

// bound bounds a store write by StoreTimeout, for a store that can be away; the memory store
// cannot, and pays nothing (no timer, no allocation on the heartbeat path).
func (r *Registry) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, remote := r.store.(Pinger); remote {
		return context.WithTimeout(ctx, r.cfg.StoreTimeout)
	}
	return ctx, noCancel
}

func noCancel() {}

// stored classifies the outcome of a store write. The store's own refusals (not found,
// generation mismatch, forbidden) pass as they are; any other failure — the store away, the
// timeout passed — is ErrStoreUnavailable, and /v1/discovery/health says so until a write or
// a ping succeeds. A caller that went away is not the store's fault.
func (r *Registry) stored(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, ErrInstanceNotFound), errors.Is(err, ErrGenerationMismatch), errors.Is(err, ErrForbidden):
		if r.storeErr.Load() != nil {
			r.storeErr.Store(nil)
		}
		return err
	case ctx.Err() != nil:
		return err
	default:
		down := err // a copy: taking err's address would move it to the heap on every call
		r.storeErr.Store(&down)
		return fmt.Errorf("%w (within the store timeout of %s): %w", ErrStoreUnavailable, r.cfg.StoreTimeout, err)
	}
}

// pingStore asks a store that can tell whether it is reachable, and records the answer.
func (r *Registry) pingStore(ctx context.Context, p Pinger) {
	pctx, cancel := context.WithTimeout(ctx, min(r.cfg.StoreTimeout, 2*time.Second))
	defer cancel()
	if err := p.Ping(pctx); err != nil {
		if ctx.Err() == nil {
			r.storeErr.Store(&err)
		}
		return
	}
	r.storeErr.Store(nil)
}

func failReason(err error) string {
	switch {
	case errors.Is(err, ErrInstanceNotFound):
		return "not_found"
	case errors.Is(err, ErrGenerationMismatch):
		return "generation_mismatch"
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	default:
		return "store"
	}
}

// Deregister removes an instance; a generation > 0 must be the current one, so that a late
// deregister of an old incarnation never removes its replacement.
func (r *Registry) Deregister(ctx context.Context, id string, generation int64) error {
	if err := r.mayTouch(ctx, id, true); err != nil {
		return err
	}
	// Recorded before the store removes it, so that every answer at a revision that lacks the
	// instance already lists it as removed (a failed deregistration leaves a harmless entry:
	// consumers drop only what the answer itself does not hold).
	if st := r.State(); !st.Complete {
		if cur, ok := r.store.Get(id); ok {
			r.drain.recordRemoval(cur, st.Epoch, r.cfg.Now())
		}
	}
	wctx, cancel := r.bound(ctx)
	rec, err := r.store.Deregister(wctx, id, generation)
	cancel()
	if err = r.stored(ctx, err); err != nil {
		return err
	}
	now := r.cfg.Now()
	if m := r.cfg.Eligibility; m != nil {
		m.Forget(rec.InstanceID, now)
	}
	st := r.State()
	r.drain.recordWithdrawal(rec.InstanceID, rec.Generation, st.Epoch, st.Revision, now, r.cfg.LeaseTTL)
	r.activity.deregistered.Add(1)
	r.journalDeregistration(rec, CallerFrom(ctx).Identity)
	r.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "deregister",
		slog.String("instance_id", rec.InstanceID), slog.String("service_name", rec.ServiceName),
		slog.Int64("generation", rec.Generation))
	return nil
}

// Sweep evicts every instance whose lease has ended and returns how many it evicted.
func (r *Registry) Sweep(ctx context.Context) (int, error) {
	now := r.cfg.Now()
	if m := r.cfg.Eligibility; m != nil {
		if vs, ok := r.store.(VerdictSharer); ok {
			r.shareVerdicts(ctx, vs)
		}
		r.syncEligibility(now)
		if m.SelfPreservation() {
			return 0, nil // too few renewals arrive: the registry is likelier cut off than the fleet dead
		}
	}
	if st := r.State(); st.Complete {
		r.drain.forgetRemovals()
	} else {
		r.drain.ageRemovals(now)
		// Restored leases keep the time they had left, so they can end inside the warm-up:
		// what is about to expire is recorded as removed first (see Deregister). The scan
		// is paid only during a warm-up.
		if el, ok := r.store.(expiringLister); ok {
			for _, rec := range el.Expiring(now) {
				r.drain.recordRemoval(rec, st.Epoch, r.cfg.Now())
			}
		} else {
			for _, rec := range r.store.Records() {
				if rec.Expired(now) {
					r.drain.recordRemoval(rec, st.Epoch, r.cfg.Now())
				}
			}
		}
	}
	gone, err := r.store.Expire(ctx, now)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	for _, rec := range gone {
		if m := r.cfg.Eligibility; m != nil {
			m.Forget(rec.InstanceID, now)
		}
		r.metrics.evictions.Inc()
		r.activity.evicted.Add(1)
		r.journalExpiry(rec, now)
		r.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "evict",
			slog.String("instance_id", rec.InstanceID), slog.String("service_name", rec.ServiceName),
			slog.Int64("generation", rec.Generation), slog.Time("lease_expired_at", rec.LeaseExpiresAt()),
			slog.Time("at", now))
	}
	return len(gone), nil
}

// expiringLister is a store that lists the records whose lease ended at or before now
// without walking every record (the memory store keeps its leases in a queue).
type expiringLister interface {
	Expiring(now time.Time) []*Record
}

// Run sweeps expired leases every SweepInterval and, when configured, writes a snapshot
// every SnapshotInterval, until ctx ends. Errors of one round are logged, not fatal.
func (r *Registry) Run(ctx context.Context) error {
	// A store with work of its own (the etcd store's watch and election) runs beside.
	if sr, ok := r.store.(Runner); ok {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sr.Run(ctx) }()
		defer func() { cancel(); <-done }()
	}
	if p, ok := r.store.(Pinger); ok {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					r.pingStore(ctx, p)
				}
			}
		}()
		defer func() { cancel(); <-done }()
	}
	sweep := time.NewTicker(r.cfg.SweepInterval)
	defer sweep.Stop()
	// Between sweeps the monitor advances at every slot of the interval: the weights in slow
	// start move a slot of the services at a time (health.RampSlots, MonitorConfig.RampStep).
	var advance <-chan time.Time
	if r.cfg.Eligibility != nil {
		t := time.NewTicker(max(r.cfg.SweepInterval/health.RampSlots, time.Millisecond))
		defer t.Stop()
		advance = t.C
	}
	reported := false // the registrations held at start whose endpoint breaks the rules
	summary := time.NewTicker(r.cfg.SummaryInterval)
	defer summary.Stop()
	var snap <-chan time.Time
	if r.cfg.SnapshotInterval > 0 {
		t := time.NewTicker(r.cfg.SnapshotInterval)
		defer t.Stop()
		snap = t.C
	}
	// With a store that shares verdicts, the elected replica publishes a change of verdict
	// at once (after a short pause that gathers a burst into one pass), not at the next sweep.
	var judged <-chan struct{}
	var publish <-chan time.Time
	vs, sharing := r.store.(VerdictSharer)
	sharing = sharing && r.cfg.Eligibility != nil
	if sharing {
		_, judged = r.cfg.Eligibility.Watch()
	}
	for {
		select {
		case <-ctx.Done():
			if snap != nil && r.Leader() && r.State().Complete {
				// A last snapshot on the way out: a restart restores the state as it was, and
				// continues above the revision consumers last saw. (Not while warming up: the
				// newest snapshot stays one that held every live instance.)
				if _, err := r.WriteSnapshot(context.WithoutCancel(ctx)); err != nil {
					r.cfg.Logger.Error("final snapshot failed", slog.Any("error", err))
				}
			}
			return nil
		case <-summary.C:
			r.logSummary(ctx)
		case <-advance:
			r.cfg.Eligibility.Advance(r.cfg.Now())
		case <-sweep.C:
			if !reported {
				reported = true
				r.reportEndpoints()
			}
			start := time.Now() // the work's own time, whatever clock the registry reads
			if _, err := r.Sweep(ctx); err != nil {
				r.cfg.Logger.Error("sweep failed", slog.Any("error", err))
			}
			r.metrics.sweep.Observe(time.Since(start).Seconds())
		case <-judged:
			judged = nil
			publish = time.After(verdictPublishDelay)
		case <-publish:
			publish = nil
			_, judged = r.cfg.Eligibility.Watch()
			if r.Leader() {
				r.shareVerdicts(ctx, vs)
			}
		case <-snap:
			if !r.Leader() {
				continue // one elected replica writes the snapshots
			}
			if !r.State().Complete {
				continue // see WriteSnapshot: the newest snapshot is never one from a warm-up
			}
			if _, err := r.WriteSnapshot(ctx); err != nil {
				r.cfg.Logger.Error("snapshot failed", slog.Any("error", err))
			}
		}
	}
}

// logSummary writes one INFO line with what happened since the last one (nothing when
// nothing did): 100,000 registrations are one line a minute, not 100,000 lines.
func (r *Registry) logSummary(ctx context.Context) {
	a := &r.activity
	reg, hb, dereg, ev := a.registered.Swap(0), a.heartbeats.Swap(0), a.deregistered.Swap(0), a.evicted.Swap(0)
	if reg+hb+dereg+ev == 0 {
		return
	}
	n, c := r.store.Counts()
	r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "registry activity", slog.Float64("over_seconds", r.cfg.SummaryInterval.Seconds()),
		slog.Int64("registered", reg), slog.Int64("heartbeats", hb), slog.Int64("deregistered", dereg), slog.Int64("evicted", ev),
		slog.Int("instances", n), slog.Int("capabilities", c), slog.Int64("revision", r.revision()))
}

// Answer is a discovery answer: the matching entries in docs/reference/api.md's order and the state they
// were read at.
type Answer struct {
	State
	Entries []Entry
	// Removed is set while the answer is incomplete: every incarnation removed since the
	// epoch began (consumers drop them from what they keep).
	Removed []apiv1.Removal
}

// Query returns the entries that match q, sorted.
func (r *Registry) Query(q *Query) Answer {
	rev := r.revision()
	st := r.stateAt(rev)
	// only a warming-up answer lists removals (merged views drop them)
	es, refused := r.judge(r.store.Query(q), q.IncludeAll, !st.Complete)
	SortEntries(es)
	return Answer{State: st, Entries: es, Removed: withRemovals(r.drain.removed(st.Epoch, st.Complete, q.ServiceName, q.CapabilityID), refused)}
}

// Wait is WaitOn for the whole fleet: it returns at the first change anywhere.
func (r *Registry) Wait(ctx context.Context, epoch string, index int64, wait time.Duration) int64 {
	return r.WaitOn(ctx, Topic{}, epoch, index, wait)
}

// WaitOn blocks until what t names changed past revision index (TopicOf), ctx ends or wait
// passes, and returns the revision then. A poll on one service is not answered for a change
// of another: the revision it then gets may be well past index (the fleet's revision, which
// every change moves). When epoch is the current epoch and index is ahead of this replica's
// revision (a consumer that failed over from a replica further along etcd's history), it
// waits for a change of the fleet: nothing newer is here yet. Otherwise (another epoch, or no
// epoch given and an index that is not the current revision) it returns at once.
func (r *Registry) WaitOn(ctx context.Context, t Topic, epoch string, index int64, wait time.Duration) int64 {
	rev, _, _ := r.watch()
	if rev < index && epoch != r.store.Epoch().ID {
		return rev
	}
	if t == (Topic{}) || !r.topics.attributed || rev < index {
		return r.park(ctx, wait, func() (bool, <-chan struct{}, <-chan struct{}) {
			rev, changed, judged := r.watch()
			return rev > index, changed, judged
		})
	}
	return r.park(ctx, wait, func() (bool, <-chan struct{}, <-chan struct{}) {
		at, topic, all := r.topics.watch(t)
		return at > index, topic, all
	})
}

// park waits until ready says the wait is over, ctx ends or wait passes, and returns the
// revision then. ready also gives the two channels closed when it may next say so.
func (r *Registry) park(ctx context.Context, wait time.Duration, ready func() (bool, <-chan struct{}, <-chan struct{})) int64 {
	done, a, b := ready()
	if done {
		return r.revision()
	}
	r.watchers.Add(1)
	defer r.watchers.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-a:
		case <-b:
		case <-timer.C:
			return r.revision()
		case <-ctx.Done():
			return r.revision()
		}
		if done, a, b = ready(); done {
			return r.revision()
		}
	}
}

// followTopics has the store's publications, and the monitor's unless the store shares
// verdicts (its revision holds them then), move the topics (WaitOn).
func (r *Registry) followTopics() {
	cp, ok := r.store.(ChangePublisher)
	if !ok {
		return // every poll waits on the fleet
	}
	r.topics.attributed = true
	cp.OnPublish(func(rev int64, c Changes) {
		r.topics.markStore(rev, c)
		r.changes2.add(rev+r.topics.judgedRev.Load(), c.Instances, c.Services, c.Capabilities, c.All)
	})
	rev, _ := r.store.Watch()
	storeMax(&r.topics.storeRev, rev)
	m := r.cfg.Eligibility
	if _, shared := r.store.(VerdictSharer); shared || m == nil {
		return
	}
	m.OnPublish(func(rev int64, touched []health.Instance, all bool) {
		n := &r.judgedNames
		n.services, n.capabilities = n.services[:0], n.capabilities[:0]
		routed := false
		for i := range touched {
			in := &touched[i]
			n.services = append(n.services, in.Service)
			n.capabilities = append(n.capabilities, in.Capabilities...)
			routed = routed || in.Routed
		}
		r.topics.markJudged(rev, n.services, n.capabilities, routed, all)
		r.changes2.addVerdicts(r.topics.storeRev.Load()+rev, touched, all)
		clear(n.services)
		clear(n.capabilities)
	})
	if wp, ok := m.(withdrawalPublisher); ok {
		wp.OnWithdrawalPublished(func(rev int64, at time.Time) {
			r.withdrawn.add(r.topics.storeRev.Load()+rev, at)
		})
	}
	mrev, _ := m.Watch()
	storeMax(&r.topics.judgedRev, mrev)
}

// Watchers returns how many requests are waiting in Wait.
func (r *Registry) Watchers() int64 { return r.watchers.Load() }

// Instance returns the catalog form of one instance.
func (r *Registry) Instance(id string) (apiv1.Instance, error) {
	rec, ok := r.store.Get(id)
	if !ok {
		return apiv1.Instance{}, fmt.Errorf("instance %q: %w", id, ErrInstanceNotFound)
	}
	return r.Wire(rec), nil
}

// Wire returns rec as the catalog lists it, with its lease and verdict as they are now (the
// verdict of rec's own incarnation, also after a newer one replaced it).
func (r *Registry) Wire(rec *Record) apiv1.Instance {
	in := rec.Instance()
	in.Eligibility, in.Weight, _ = r.eligibilityOf(rec)
	return in
}

// Catalog returns every instance, sorted by service name and instance id.
func (r *Registry) Catalog() apiv1.CatalogResponse {
	out, n, all := r.CatalogStream()
	out.Instances = slices.AppendSeq(make([]apiv1.Instance, 0, n), all)
	return out
}

// CatalogStream returns the catalog without its instances, how many it has, and the
// instances one at a time in Catalog's order, each made when it is asked for: a catalog of a
// large fleet can be written as it is made, never held whole.
func (r *Registry) CatalogStream() (apiv1.CatalogResponse, int, iter.Seq[apiv1.Instance]) {
	st, recs := r.CatalogRecords()
	head := apiv1.CatalogResponse{RegistryEpoch: st.Epoch, Region: st.Region, Revision: st.Revision}
	return head, len(recs), func(yield func(apiv1.Instance) bool) {
		for _, rec := range recs {
			if !yield(r.Wire(rec)) {
				return
			}
		}
	}
}

// CatalogRecords returns the registry's state and its records in Catalog's order: what the
// catalog lists at this revision, a pointer each. A listing paged over a large catalog holds
// these and makes each page's instances (Wire) when it is asked for, rather than the wire
// form of the whole catalog at once.
func (r *Registry) CatalogRecords() (State, []*Record) {
	st := r.State()
	return st, sortedRecords(r.store.Records())
}

func sortedRecords(recs []*Record) []*Record {
	slices.SortFunc(recs, catalogOrder)
	return recs
}

// Routes returns the inputs of route derivation: every manifest and every public path,
// in instance order. It walks only the records that publish either (Store.RoutedRecords).
func (r *Registry) Routes() apiv1.RoutesResponse {
	st := r.State()
	out := apiv1.RoutesResponse{RegistryEpoch: st.Epoch, Region: st.Region, Revision: st.Revision, Complete: st.Complete,
		Manifests: []apiv1.ManifestEntry{}, PublicPaths: []apiv1.PublicPath{}, Removed: r.drain.routedRemoved(st.Epoch, st.Complete)}
	refused := r.routesOf(sortedRecords(r.store.RoutedRecords()), &out)
	if !st.Complete {
		out.Removed = withRemovals(out.Removed, refused)
	}
	return out
}

// RoutesOf returns the route inputs of the instances ids alone, in answer order, with the
// state it was read at: what a routes delta watch sends of the instances that changed.
func (r *Registry) RoutesOf(ids []string) apiv1.RoutesResponse {
	st := r.State()
	out := apiv1.RoutesResponse{RegistryEpoch: st.Epoch, Region: st.Region, Revision: st.Revision, Complete: st.Complete,
		Manifests: []apiv1.ManifestEntry{}, PublicPaths: []apiv1.PublicPath{}}
	recs := make([]*Record, 0, len(ids))
	for _, id := range ids {
		if rec, ok := r.store.Get(id); ok && rec.Routed() {
			recs = append(recs, rec)
		}
	}
	r.routesOf(sortedRecords(recs), &out)
	return out
}

// routesOf appends the manifests and public paths of recs (in catalog order) to out, but
// for the records refused before admission (never admitted, and nothing listens: no route
// goes there), which it returns.
func (r *Registry) routesOf(recs []*Record, out *apiv1.RoutesResponse) []apiv1.Removal {
	refused := r.refusedBeforeAdmission(recs)
	next := 0 // refused is in recs' order: walked beside it
	for _, rec := range recs {
		if next < len(refused) && refused[next].InstanceID == rec.InstanceID {
			next++
			continue
		}
		if rec.Manifest != nil {
			state, weight, inPanic, excluded := r.eligibilityExcluded(rec)
			out.Manifests = append(out.Manifests, apiv1.ManifestEntry{InstanceID: rec.InstanceID, ServiceName: rec.ServiceName,
				ServiceVersion: rec.ServiceVersion, Endpoint: rec.Endpoint, Generation: rec.Generation, Manifest: rec.Manifest,
				Eligibility: state, Weight: weight, Panic: inPanic, Excluded: excluded, Restored: rec.Restored()})
		}
		for _, c := range rec.Capabilities {
			for _, p := range c.PublicPaths {
				out.PublicPaths = append(out.PublicPaths, apiv1.PublicPath{Path: p, CapabilityID: c.CapabilityID, Provider: c.Provider,
					InstanceID: rec.InstanceID, ServiceName: rec.ServiceName, Endpoint: rec.Endpoint, Generation: rec.Generation})
			}
		}
	}
	return refused
}
