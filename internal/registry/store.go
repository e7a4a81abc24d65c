package registry

import (
	"context"
	"errors"
	"time"
)

// Errors a Store returns; the server maps them to docs/reference/api.md's codes.
var (
	// ErrInstanceNotFound: no record with that instance id (404 INSTANCE_NOT_FOUND).
	ErrInstanceNotFound = errors.New("instance not found")
	// ErrGenerationMismatch: the generation named is not the current one (410).
	ErrGenerationMismatch = errors.New("generation mismatch")
	// ErrForbidden: the caller does not own the instance (403).
	ErrForbidden = errors.New("forbidden")
	// ErrStoreUnavailable: the store did not answer within the store timeout, or failed
	// (503 STORE_UNAVAILABLE with Retry-After).
	ErrStoreUnavailable = errors.New("store unavailable")
)

// Epoch identifies one life of a store's state.
type Epoch struct {
	// ID is the opaque registry_epoch; it changes whenever the state starts from empty or is
	// restored from a snapshot, so that one epoch never has two histories.
	ID string
	// Start is when this life began (the store's start, or the restore of a snapshot).
	Start time.Time
	// WarmUp is true when the state may lack live instances at Start (it started empty, or
	// from a snapshot taken some time before): the registry then answers complete=false for
	// one lease TTL from Start, the time every live provider needs to register again.
	WarmUp bool
}

// Pinger is a Store that can tell whether it is reachable (the etcd store); the registry
// pings it every second to say so in /v1/discovery/health.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Runner is a Store with work of its own (the etcd store's watch, election and lease
// keep-alives): Registry.Run runs it beside its own loop and stops it when it returns.
type Runner interface {
	Run(ctx context.Context) error
}

// LeaderElector is a Store whose replicas elect one to do fleet-wide work (active probes,
// snapshots). Leader reports whether this replica is it; a Store without it is always the
// leader (one process).
type LeaderElector interface {
	Leader() bool
}

// LeaseExpirer is a Store that expires leases itself, renewed through any replica (etcd
// leases): the eligibility engine then leaves leases and self-preservation to the store.
type LeaseExpirer interface {
	ExpiresLeases() bool
}

// ExpiresLeases reports whether s expires leases itself (a LeaseExpirer that says so).
func ExpiresLeases(s Store) bool {
	e, ok := s.(LeaseExpirer)
	return ok && e.ExpiresLeases()
}

// RemovalNotifier is a Store that other replicas change (etcd): it calls the function given
// to OnRemoved with the record of every instance another replica removed (deregistered, or
// whose lease ended), before the removal is visible in its view, so that the registry's
// warm-up answers list it among the removals.
type RemovalNotifier interface {
	OnRemoved(func(rec *Record))
}

// ChangeNotifier is a Store that other replicas change (etcd; every VerdictSharer is one) and
// that says what changed: it calls the function given to OnChanged with the id of each
// instance whose record or self-reported health it changed from what it read of the others'
// writes, once its view holds the change, and with "" when it read its whole view anew (after
// a compaction or a reconnect). The registry hands the eligibility monitor those instances at
// its next sweep, and the whole fleet after "" (it walked the fleet at every sweep the
// store's revision moved before).
type ChangeNotifier interface {
	OnChanged(func(id string))
}

// Store keeps the registered records, their indexes, the generation counter and the
// revision. All methods are safe for concurrent use. Records handed out are shared: callers
// read them and never change them, except through the lease and health atomics.
type Store interface {
	// Name is the store's kind, reported by /v1/discovery/health ("memory", "etcd").
	Name() string
	// Epoch returns the current epoch.
	Epoch() Epoch

	// Register stores rec as the current incarnation of rec.InstanceID, replacing any
	// other, sets rec.Generation to the next generation (strictly increasing for the life
	// of the store) and advances the revision: at once, or — a store whose revision follows a
	// watch (etcd) — once the watch has brought in every write before it, a moment after
	// Register returned, so that a revision always holds every write up to it, other
	// replicas' included. The record itself is read at once either way.
	Register(ctx context.Context, rec *Record) error
	// Heartbeat extends the lease of the record with that id and generation to expires and
	// stores its health; it advances the revision only when the health changed. It returns
	// ErrInstanceNotFound or ErrGenerationMismatch (wrapped). It confirms a restored record
	// (Record.Confirm), which advances the revision too.
	Heartbeat(ctx context.Context, id string, generation int64, health string, expires time.Time) (*Record, error)
	// Deregister removes the record with that id; a generation > 0 must be the current one
	// (ErrGenerationMismatch otherwise). It advances the revision (as Register does).
	Deregister(ctx context.Context, id string, generation int64) (*Record, error)
	// Expire removes every record whose lease ended at or before now and returns them.
	Expire(ctx context.Context, now time.Time) ([]*Record, error)
	// Restore replaces the whole state with recs, the epoch, the revision and a generation
	// counter no lower than generation (the epoch is a new one; the revision and generations
	// carry on from the snapshot).
	Restore(ctx context.Context, epoch Epoch, revision, generation int64, recs []*Record) error

	// Get returns the current record of an instance.
	Get(id string) (*Record, bool)
	// Records returns every record, in no particular order.
	Records() []*Record
	// ProbedRecords returns the records whose manifest declares a probe class (Probed), in
	// no particular order: the prober asks for them every 100 ms, and a store keeps them
	// apart so that the answer costs the probed instances, not the fleet.
	ProbedRecords() []*Record
	// RoutedRecords returns the records that are inputs of the gateways' routes (Routed), in
	// no particular order: every gateway asks for them after each change, and a store keeps
	// them apart so that the answer costs the routed instances, not the fleet.
	RoutedRecords() []*Record
	// Query returns the entries that match q, in no particular order.
	Query(q *Query) []Entry
	// Counts returns how many instances and capabilities are registered.
	Counts() (instances, capabilities int)
	// Generation returns the last generation assigned.
	Generation() int64
	// Watch returns the current revision and a channel that is closed when the revision
	// next changes. The channel is never sent on, only closed; one channel serves every
	// watcher of a revision, so thousands of waiters cost one close.
	Watch() (revision int64, changed <-chan struct{})
}
