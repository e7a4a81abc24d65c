package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/storeindex"
)

// The optional capabilities the registry looks for, asserted here so that a renamed method
// fails the build instead of silently turning the capability off.
var (
	_ registry.Store           = (*Store)(nil)
	_ registry.Runner          = (*Store)(nil)
	_ registry.LeaderElector   = (*Store)(nil)
	_ registry.LeaseExpirer    = (*Store)(nil)
	_ registry.Pinger          = (*Store)(nil)
	_ registry.RemovalNotifier = (*Store)(nil)
	_ registry.VerdictSharer   = (*Store)(nil)
)

// tombstone is written over an instance key by a deregistration just before its lease is
// revoked, so that watchers tell a deregistration from a lease expiry.
const tombstone = `{"deregistered":true}`

// Config configures a Store.
type Config struct {
	Client *clientv3.Client
	// Prefix of every key (default "/meshflows/").
	Prefix string
	// LeaseTTL is the lease of each registration (default 90 s).
	LeaseTTL time.Duration
	// ReplicaID names this replica in the election (default: the epoch load time).
	ReplicaID string
	Logger    *slog.Logger
	Now       func() time.Time
}

// Store is the etcd registry.Store.
type Store struct {
	cfg   Config
	index *storeindex.Index
	epoch registry.Epoch

	leases  sync.Map   // instance id -> clientv3.LeaseID
	renewer *renewer   // heartbeats' lease renewals, over streams Run keeps open
	commits *committer // registrations waiting to be written together
	healthM sync.Mutex
	health  map[string]string // instance id -> health, from health keys

	evictM  sync.Mutex
	evicted []*registry.Record

	startRev int64 // the revision the initial view was read at
	leader   atomic.Bool

	verdictM    sync.Mutex
	verdicts    map[string]registry.SharedVerdict // instance id -> the elected replica's verdict
	acksM       sync.Mutex
	acks        map[string]gatewayAck // gateway id -> its last acknowledgement, while its lease lives
	onVerdict   atomic.Pointer[func(registry.SharedVerdict)]
	rampClock   atomic.Pointer[time.Time] // the elected replica's ramp clock, nil before one is read
	onRampClock atomic.Pointer[func(time.Time) []string]
	operators   atomic.Pointer[[]byte]       // the operator actions' state (operators key), nil before one is read
	onOperators atomic.Pointer[func([]byte)] // hears each new state the watch sees
	onOutcomes  atomic.Pointer[func(*apiv1.OutcomesRequest)]
	onRemoved   atomic.Pointer[func(*registry.Record)]
	onChanged   atomic.Pointer[func(string)]
	onEvent     atomic.Pointer[func(journal.Stored)]
	eventSeq    atomic.Int64                      // this replica's event keys
	ownEvents   ownWrites[[]journal.Stored]       // the batches of events this replica is writing
	ownVerdicts ownWrites[registry.SharedVerdict] // the verdicts it is writing
	pendingM    sync.Mutex
	pending     map[clientv3.LeaseID]*registration // registrations being committed, by lease (commit.go)
}

var (
	_ registry.VerdictSharer = (*Store)(nil)
	_ registry.AckSharer     = (*Store)(nil)
	_ registry.Pinger        = (*Store)(nil)
)

// maxTxnOps bounds the operations of one etcd transaction (etcd's default limit is 128).
const maxTxnOps = 128

func (s *Store) key(parts ...string) string { return s.cfg.Prefix + strings.Join(parts, "") }

// New connects the store: it creates the epoch if the cluster has none, and reads the whole
// current view. Run must run to keep the view current.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("etcdstore: no client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/meshflows/"
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = registry.DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{cfg: cfg, index: storeindex.NewIndex(), health: map[string]string{}, verdicts: map[string]registry.SharedVerdict{},
		acks: map[string]gatewayAck{}, pending: map[clientv3.LeaseID]*registration{}, renewer: newRenewer(leaseStreams(cfg.Client)), commits: newCommitter()}
	if s.cfg.ReplicaID == "" {
		s.cfg.ReplicaID = cfg.Now().UTC().Format(time.RFC3339Nano)
	}
	if err := s.loadEpoch(ctx); err != nil {
		return nil, err
	}
	if err := s.resync(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

type epochDoc struct {
	ID    string    `json:"id"`
	Start time.Time `json:"start"`
}

// loadEpoch reads the cluster's epoch, creating it (once, in a transaction) when absent.
func (s *Store) loadEpoch(ctx context.Context) error {
	now := s.cfg.Now().UTC()
	doc, _ := json.Marshal(epochDoc{ID: now.Format(time.RFC3339Nano), Start: now})
	k := s.key("epoch")
	resp, err := s.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(doc))).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: epoch: %w", err)
	}
	if resp.Succeeded {
		s.epoch = registry.Epoch{ID: now.Format(time.RFC3339Nano), Start: now, WarmUp: true}
		return nil
	}
	var d epochDoc
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || json.Unmarshal(kvs[0].Value, &d) != nil {
		return errors.New("etcdstore: the epoch key is unreadable")
	}
	// Every replica counts the warm-up from the epoch's creation: Empty holds, and the warm-up
	// ends one lease TTL after Start whoever created it.
	s.epoch = registry.Epoch{ID: d.ID, Start: d.Start, WarmUp: true}
	return nil
}

// resync reads the complete view and replaces the local index with it.
func (s *Store) resync(ctx context.Context) error {
	resp, err := s.cfg.Client.Get(ctx, s.key(""), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcdstore: read the view: %w", err)
	}
	health := map[string]string{}
	verdicts := map[string]registry.SharedVerdict{}
	acks := map[string]gatewayAck{}
	var insts, events []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, s.key("events/")):
			events = append(events, kv)
		case strings.HasPrefix(k, s.key("gateways/")):
			if a, ok := s.gatewayAck(kv); ok {
				acks[a.ack.GatewayID] = a
			}
		case strings.HasPrefix(k, s.key("verdicts/")):
			if v, ok := s.verdict(kv); ok {
				verdicts[v.InstanceID] = v
			}
		case strings.HasPrefix(k, s.key("health/")):
			health[strings.TrimPrefix(k, s.key("health/"))] = string(kv.Value)
		case k == s.key(rampClockKey):
			if t, ok := s.readRampClock(kv); ok {
				s.rampClock.Store(&t)
			}
		case k == s.key(operatorsKey):
			v := slices.Clone(kv.Value)
			s.operators.Store(&v)
			if fn := s.onOperators.Load(); fn != nil {
				(*fn)(v)
			}
		case strings.HasPrefix(k, s.key("instances/")):
			insts = append(insts, kv)
		}
	}
	s.healthM.Lock()
	s.health = health
	s.healthM.Unlock()
	s.verdictM.Lock()
	s.verdicts = verdicts
	s.verdictM.Unlock()
	s.ownVerdicts.reset() // the view read decoded them; the broken watch may never bring some back
	s.ownEvents.reset()
	s.acksM.Lock()
	s.acks = acks
	s.acksM.Unlock()
	var recs []*registry.Record
	for _, kv := range insts {
		if rec := s.record(kv); rec != nil {
			recs = append(recs, rec)
		}
	}
	s.index.Reset(recs, resp.Header.Revision)
	s.changed("") // every record may have changed
	s.startRev = resp.Header.Revision
	s.replayEvents(events)
	return nil
}

// record decodes an instance key and remembers its lease; nil for a tombstone or an
// unreadable value.
func (s *Store) record(kv *mvccpb.KeyValue) *registry.Record {
	rec := s.decodeRecord(kv)
	if rec != nil {
		s.leases.Store(rec.InstanceID, clientv3.LeaseID(kv.Lease))
	}
	return rec
}

// decodeRecord decodes an instance key; nil for a tombstone or an unreadable value.
func (s *Store) decodeRecord(kv *mvccpb.KeyValue) *registry.Record {
	if string(kv.Value) == tombstone {
		return nil
	}
	var in apiv1.Instance
	if err := json.Unmarshal(kv.Value, &in); err != nil {
		s.cfg.Logger.Warn("unreadable instance record in etcd", slog.String("key", string(kv.Key)), slog.Any("error", err))
		return nil
	}
	in.Generation = kv.ModRevision
	s.healthM.Lock()
	if h, ok := s.health[in.InstanceID]; ok {
		in.Health = h
	}
	s.healthM.Unlock()
	return registry.RecordFromInstance(in, s.cfg.Now().Add(s.cfg.LeaseTTL))
}

// Run keeps the local view current from a watch of the prefix, resyncing after a
// compaction or a broken watch, and campaigns for leadership, until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.campaign(ctx) })
	wg.Go(func() { s.renewer.run(ctx) })
	wg.Go(func() { s.runCommitter(ctx) })
	defer wg.Wait()
	rev := s.startRev
	for ctx.Err() == nil {
		wch := s.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), s.key(""), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				s.cfg.Logger.Warn("etcd watch broken; resyncing", slog.Any("error", err))
				break
			}
			s.applyAll(resp.Events)
			rev = resp.Header.Revision
		}
		if ctx.Err() != nil {
			break
		}
		// A compaction or a reconnect may have lost events: read a complete view first.
		for ctx.Err() == nil {
			if err := s.resync(ctx); err == nil {
				rev = s.startRev
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// applyAll folds one watch response into the local view, moving the revision readers see once,
// after all of it: the keys etcd wrote at one revision (a registration's record and health,
// a batch of verdicts) come in one response, and an answer at that revision must hold them all.
//
// The events of a response are every write up to the last one's revision, so the revision
// also moves past this replica's own writes up to it, which its view took when it made them.
func (s *Store) applyAll(evs []*clientv3.Event) {
	if len(evs) == 0 {
		return // a progress notification
	}
	s.index.Hold()
	defer s.index.Release()
	for _, ev := range evs {
		s.apply(ev)
	}
	s.index.Reached(evs[len(evs)-1].Kv.ModRevision)
}

// apply folds one watch event into the local view.
func (s *Store) apply(ev *clientv3.Event) {
	k := string(ev.Kv.Key)
	switch {
	case strings.HasPrefix(k, s.key("events/")):
		if ev.Type == clientv3.EventTypePut {
			s.event(ev.Kv)
		}
	case k == s.key(rampClockKey):
		if ev.Type != clientv3.EventTypePut {
			return
		}
		t, ok := s.readRampClock(ev.Kv)
		if !ok {
			return
		}
		s.rampClock.Store(&t)
		fn := s.onRampClock.Load()
		if fn == nil {
			s.index.Touch(ev.Kv.ModRevision) // nothing tells which answers it moves
			return
		}
		// as a verdict's: answers at this revision weigh by it, and those it moved are told
		s.index.TouchIDs((*fn)(t), ev.Kv.ModRevision)
	case k == s.key(operatorsKey):
		if ev.Type != clientv3.EventTypePut {
			return
		}
		v := slices.Clone(ev.Kv.Value)
		s.operators.Store(&v)
		if fn := s.onOperators.Load(); fn != nil {
			(*fn)(v)
		}
	case strings.HasPrefix(k, s.key("gateways/")):
		id := strings.TrimPrefix(k, s.key("gateways/"))
		if ev.Type == clientv3.EventTypeDelete {
			s.acksM.Lock()
			delete(s.acks, id)
			s.acksM.Unlock()
			return
		}
		if a, ok := s.gatewayAck(ev.Kv); ok {
			s.acksM.Lock()
			s.acks[id] = a
			s.acksM.Unlock()
		}
	case strings.HasPrefix(k, s.key("outcomes/")):
		if ev.Type != clientv3.EventTypePut {
			return
		}
		var req apiv1.OutcomesRequest
		if err := json.Unmarshal(ev.Kv.Value, &req); err != nil {
			s.cfg.Logger.Warn("unreadable forwarded outcomes in etcd", slog.String("key", k))
			return
		}
		if fn := s.onOutcomes.Load(); fn != nil {
			(*fn)(&req)
		}
	case strings.HasPrefix(k, s.key("verdicts/")):
		id := strings.TrimPrefix(k, s.key("verdicts/"))
		if ev.Type == clientv3.EventTypeDelete {
			s.verdictM.Lock()
			delete(s.verdicts, id)
			s.verdictM.Unlock()
			return // with the instance's lease: its own deletion moves the revision
		}
		v, ok := s.ownVerdicts.take(k, ev.Kv.Value)
		if !ok {
			if v, ok = s.verdict(ev.Kv); !ok {
				return
			}
		}
		s.verdictM.Lock()
		s.verdicts[id] = v
		s.verdictM.Unlock()
		if fn := s.onVerdict.Load(); fn != nil {
			(*fn)(v)
		}
		// A verdict is part of what discovery answers: the revision moves to etcd's, after
		// the verdict is followed, so that an answer at this revision holds it on every replica.
		s.index.TouchID(id, ev.Kv.ModRevision)
	case strings.HasPrefix(k, s.key("health/")):
		id := strings.TrimPrefix(k, s.key("health/"))
		s.healthM.Lock()
		if ev.Type == clientv3.EventTypeDelete {
			delete(s.health, id)
		} else {
			s.health[id] = string(ev.Kv.Value)
		}
		s.healthM.Unlock()
		if rec, ok := s.index.Get(id); ok && ev.Type == clientv3.EventTypePut && rec.SetHealth(string(ev.Kv.Value)) {
			s.index.TouchRecord(rec, ev.Kv.ModRevision)
			s.changed(id)
		}
	case strings.HasPrefix(k, s.key("instances/")):
		id := strings.TrimPrefix(k, s.key("instances/"))
		cur, exists := s.index.Get(id)
		if exists && cur.Generation > ev.Kv.ModRevision {
			return // a newer incarnation is already known (written by this replica)
		}
		if ev.Type == clientv3.EventTypeDelete {
			if exists {
				s.removed(cur)
				s.index.Remove(id, cur, ev.Kv.ModRevision)
				s.changed(id)
				// Not tombstoned first: the lease expired. Count it as an eviction.
				s.evictM.Lock()
				s.evicted = append(s.evicted, cur)
				s.evictM.Unlock()
			}
			s.leases.Delete(id)
			return
		}
		if string(ev.Kv.Value) == tombstone {
			if exists {
				s.removed(cur)
				s.index.Remove(id, cur, ev.Kv.ModRevision)
				s.changed(id)
			}
			return
		}
		if exists && cur.Generation == ev.Kv.ModRevision {
			return // this replica's own write, already in the view (applyAll moves the revision)
		}
		if s.own(ev.Kv) {
			return // this replica's own write, whose commit has not returned yet
		}
		// Not Put: this replica's commit may have put its own record of this generation
		// since the look above, and the copy decoded here must not replace it (the
		// registry holds that one, with its handles).
		if rec := s.record(ev.Kv); rec != nil {
			s.index.PutNewer(rec, ev.Kv.ModRevision)
			s.changed(id)
		}
	}
}

// campaign keeps this replica in the election for the singleton duties. On the way out it
// resigns, so that another replica takes over at once rather than after the session's TTL.
func (s *Store) campaign(ctx context.Context) {
	for ctx.Err() == nil {
		// The session outlives ctx just long enough to resign and revoke its lease.
		sess, err := concurrency.NewSession(s.cfg.Client, concurrency.WithTTL(10), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		e := concurrency.NewElection(sess, s.key("leader"))
		if err := e.Campaign(ctx, s.cfg.ReplicaID); err == nil {
			s.leader.Store(true)
			s.cfg.Logger.Info("elected for the singleton duties", slog.String("replica", s.cfg.ReplicaID))
			select {
			case <-ctx.Done():
			case <-sess.Done():
				s.cfg.Logger.Warn("leadership lost", slog.String("replica", s.cfg.ReplicaID))
			}
			s.leader.Store(false)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			e.Resign(rctx)
			cancel()
		}
		sess.Close()
	}
}

// OnChanged implements registry.ChangeNotifier.
func (s *Store) OnChanged(fn func(id string)) { s.onChanged.Store(&fn) }

// changed tells the registry that the view now holds a change of instance id made elsewhere
// ("": the whole view was read anew).
func (s *Store) changed(id string) {
	if fn := s.onChanged.Load(); fn != nil {
		(*fn)(id)
	}
}

// OnRemoved implements registry.RemovalNotifier.
func (s *Store) OnRemoved(fn func(rec *registry.Record)) { s.onRemoved.Store(&fn) }

// removed tells the registry, before the view drops it, that rec was removed.
func (s *Store) removed(rec *registry.Record) {
	if fn := s.onRemoved.Load(); fn != nil {
		(*fn)(rec)
	}
}

// ExpiresLeases reports that etcd expires the leases and that heartbeats renew them through
// any replica: a replica's eligibility engine must not judge lease expiry or silence.
func (s *Store) ExpiresLeases() bool { return true }

// Leader reports whether this replica holds the singleton duties now.
func (s *Store) Leader() bool { return s.leader.Load() }

// Name implements registry.Store.
func (s *Store) Name() string { return "etcd" }

// Epoch implements registry.Store.
func (s *Store) Epoch() registry.Epoch { return s.epoch }

// Ping reports whether etcd answers (the registry's /readyz).
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.cfg.Client.Get(ctx, s.key("epoch"))
	return err
}

func (s *Store) ttlSeconds() int64 { return int64(math.Ceil(s.cfg.LeaseTTL.Seconds())) }

// Register implements registry.Store: a new lease, the record and its health put under it
// in one transaction — shared with the registrations that arrive meanwhile (commit.go); the
// revision of that transaction is the generation.
func (s *Store) Register(ctx context.Context, rec *registry.Record) error {
	lease, err := s.cfg.Client.Grant(ctx, s.ttlSeconds())
	if err != nil {
		return fmt.Errorf("etcd lease: %w", err)
	}
	in := rec.Instance()
	in.Generation = 0
	val, err := apijson.Instance(make([]byte, 0, 1024), &in) // encoding/json's reflection was 3.5 % of a registration's CPU
	if err != nil {
		return err
	}
	w := s.newRegistration(rec, string(val), lease.ID)
	c, err := s.commit(ctx, w)
	if err != nil {
		s.revokeSoon(ctx, lease.ID)
		return fmt.Errorf("etcd put: %w", err)
	}
	if prev := c.prev; prev != nil && prev.Lease != 0 && clientv3.LeaseID(prev.Lease) != lease.ID {
		s.revokeSoon(ctx, clientv3.LeaseID(prev.Lease)) // the replaced incarnation's lease holds nothing now
	}
	return nil
}

// revokeSoon revokes a lease that holds nothing of use, bounded: the caller's deadline may
// have passed (the revocation is attempted anyway), and etcd may be away (the lease then
// expires by itself).
func (s *Store) revokeSoon(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	s.cfg.Client.Revoke(rctx, id)
}

// current returns the record of id at generation (0: any), from the local view or, when
// the view has not seen it yet, from etcd.
func (s *Store) current(ctx context.Context, id string, generation int64) (*registry.Record, error) {
	rec, ok := s.index.Get(id)
	if !ok || (generation != 0 && rec.Generation < generation) {
		resp, err := s.cfg.Client.Get(ctx, s.key("instances/", id))
		if err != nil {
			return nil, fmt.Errorf("etcd get: %w", err)
		}
		if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) == tombstone {
			return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
		}
		if rec = s.record(resp.Kvs[0]); rec == nil {
			return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
		}
	}
	if generation != 0 && rec.Generation != generation {
		return nil, fmt.Errorf("instance %q: generation %d is not the current generation %d: %w", id, generation, rec.Generation, registry.ErrGenerationMismatch)
	}
	return rec, nil
}

// Heartbeat implements registry.Store: a keep-alive of the instance's lease, plus a health
// key update when the health changed.
func (s *Store) Heartbeat(ctx context.Context, id string, generation int64, health string, expires time.Time) (*registry.Record, error) {
	rec, err := s.current(ctx, id, generation)
	if err != nil {
		return nil, err
	}
	l, ok := s.leases.Load(id)
	if !ok {
		return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
	}
	if err := s.renewLease(ctx, l.(clientv3.LeaseID)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, fmt.Errorf("instance %q: lease expired: %w", id, registry.ErrInstanceNotFound)
		}
		return nil, fmt.Errorf("etcd keep-alive: %w", err)
	}
	rec.SetLeaseExpiresAt(expires)
	if rec.Health() != health {
		if _, err := s.cfg.Client.Put(ctx, s.key("health/", id), health, clientv3.WithLease(l.(clientv3.LeaseID))); err != nil {
			return nil, fmt.Errorf("etcd put health: %w", err)
		}
	}
	return rec, nil
}

// Deregister implements registry.Store: in one transaction that compares the generation, a
// tombstone over the record; then the lease is revoked, which deletes it (and its health
// key, if a heartbeat wrote one).
func (s *Store) Deregister(ctx context.Context, id string, generation int64) (*registry.Record, error) {
	k := s.key("instances/", id)
	cmp := clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	if generation != 0 {
		cmp = clientv3.Compare(clientv3.ModRevision(k), "=", generation)
	}
	resp, err := s.cfg.Client.Txn(ctx).If(cmp, clientv3.Compare(clientv3.Value(k), "!=", tombstone)).
		Then(clientv3.OpPut(k, tombstone, clientv3.WithIgnoreLease(), clientv3.WithPrevKV())).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd deregister: %w", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) == tombstone {
			return nil, fmt.Errorf("instance %q: %w", id, registry.ErrInstanceNotFound)
		}
		return nil, fmt.Errorf("instance %q: generation %d is not the current generation %d: %w", id, generation, kvs[0].ModRevision, registry.ErrGenerationMismatch)
	}
	rec, _ := s.index.Get(id)
	lease, held := s.leases.Load(id)
	if prev := resp.Responses[0].GetResponsePut().GetPrevKv(); prev != nil && (rec == nil || rec.Generation != prev.ModRevision) {
		// Registered through another replica and not yet in this one's view: the record is
		// read from what the deregistration replaced (its log line names the service).
		if r := s.decodeRecord(prev); r != nil {
			rec, lease, held = r, clientv3.LeaseID(prev.Lease), prev.Lease != 0
		}
	}
	if held {
		if _, err := s.cfg.Client.Revoke(ctx, lease.(clientv3.LeaseID)); err != nil {
			s.cfg.Logger.Warn("revoking a deregistered instance's lease failed; it will expire", slog.String("instance_id", id), slog.Any("error", err))
		}
	}
	if rec == nil {
		return &registry.Record{InstanceID: id, Generation: generation}, nil
	}
	s.index.RemoveAhead(id, rec, resp.Header.Revision) // the revision follows the watch
	return rec, nil
}

// Expire implements registry.Store: etcd expires the leases; this returns the instances
// whose expiry the watch has seen since the last call.
func (s *Store) Expire(context.Context, time.Time) ([]*registry.Record, error) {
	s.evictM.Lock()
	defer s.evictM.Unlock()
	out := s.evicted
	s.evicted = nil
	return out, nil
}

// Restore implements registry.Store: etcd keeps the state; a snapshot is not restored into it.
func (s *Store) Restore(context.Context, registry.Epoch, int64, int64, []*registry.Record) error {
	return errors.New("the etcd store keeps its own state: restoring a snapshot into it is not supported")
}

// Get implements registry.Store.
func (s *Store) Get(id string) (*registry.Record, bool) { return s.index.Get(id) }

// Records implements registry.Store.
func (s *Store) Records() []*registry.Record { return s.index.Records() }

// ProbedRecords implements registry.Store.
func (s *Store) ProbedRecords() []*registry.Record { return s.index.ProbedRecords() }

// RoutedRecords implements registry.Store.
func (s *Store) RoutedRecords() []*registry.Record { return s.index.RoutedRecords() }

// Query implements registry.Store.
func (s *Store) Query(q *registry.Query) []registry.Entry { return s.index.Query(q) }

// Counts implements registry.Store.
func (s *Store) Counts() (int, int) { return s.index.Counts() }

// Generation implements registry.Store: generations are etcd revisions; the last one this
// replica assigned may be ahead of the revision its watch has reached.
func (s *Store) Generation() int64 { return s.index.Newest() }

// Watch implements registry.Store.
func (s *Store) Watch() (int64, <-chan struct{}) { return s.index.Watch() }

// OnPublish implements registry.ChangePublisher.
func (s *Store) OnPublish(fn func(rev int64, c registry.Changes)) { s.index.OnPublish(fn) }
