package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshflows/meshflows/internal/registry"
)

// Registrations that arrive while one is being written are written together, in one
// transaction (group commit): under load a burst of registrations costs etcd a few
// transactions, and this replica a few calls, instead of one each. Every instance of a batch
// gets the batch's revision as its generation (fencing compares each key's own revision, so
// a shared number is harmless), and the revision readers see moves to it once the watch has
// brought in the whole batch (storeindex.Index.PutAhead). Two registrations of the same
// instance never share a batch (etcd refuses a transaction that writes a key twice): the
// second waits for the next.

// commitBatch bounds the registrations of one transaction (two operations each).
const commitBatch = maxTxnOps / 2

// errStopped says the store's Run ended while a registration waited for its batch.
var errStopped = errors.New("the etcd store stopped")

// registration is one registration waiting for its batch: its operations, and where its
// outcome goes.
type registration struct {
	rec      *registry.Record
	lease    clientv3.LeaseID
	key      string
	ops      [2]clientv3.Op // see newRegistration
	deadline time.Time      // the caller's, zero without one
	done     chan committed
}

// putOp is the place of the instance's put among a registration's operations.
const putOp = 1

// newRegistration returns the registration of rec, whose encoded record is val, under lease.
// Its record carries its health, so no health key is written: the previous incarnation's, if
// any, is deleted first (a replica that reads the two events in order never applies a stale
// health to the new record), and a heartbeat writes one when the health changes. Deleting a
// key that does not exist writes nothing in etcd, where a put of the health key made the
// registration's every later lease grant dearer (see journal.go).
func (s *Store) newRegistration(rec *registry.Record, val string, lease clientv3.LeaseID) *registration {
	k := s.key("instances/", rec.InstanceID)
	return &registration{rec: rec, lease: lease, key: k, done: make(chan committed, 1), ops: [2]clientv3.Op{
		clientv3.OpDelete(s.key("health/", rec.InstanceID)),
		putOp: clientv3.OpPut(k, val, clientv3.WithLease(lease), clientv3.WithPrevKV()),
	}}
}

// committed is a registration's outcome: the batch's revision and the record it replaced.
type committed struct {
	rev  int64
	prev *mvccpb.KeyValue
	err  error
}

// committer queues registrations for the goroutine that writes them (Run's).
type committer struct {
	queue   chan *registration
	running chan struct{} // closed when the writing goroutine starts
	stopped chan struct{} // closed when it ends
}

func newCommitter() *committer {
	return &committer{queue: make(chan *registration, commitBatch), running: make(chan struct{}), stopped: make(chan struct{})}
}

// commit writes w: in a batch when Run's writer runs, else in a transaction of its own.
func (s *Store) commit(ctx context.Context, w *registration) (committed, error) {
	c := s.commits
	select {
	case <-c.running:
	default:
		return s.commitAlone(ctx, w)
	}
	if d, ok := ctx.Deadline(); ok {
		w.deadline = d
	}
	select {
	case c.queue <- w:
	case <-c.stopped:
		return committed{}, errStopped
	case <-ctx.Done():
		return committed{}, ctx.Err()
	}
	select {
	case r := <-w.done:
		return r, r.err
	case <-c.stopped:
		select {
		case r := <-w.done:
			return r, r.err
		default:
			return committed{}, errStopped
		}
	case <-ctx.Done():
		return committed{}, ctx.Err() // the batch may still write it: as when a lone write times out
	}
}

// commitAlone writes w in a transaction of its own (before Run starts), under the caller's
// context.
func (s *Store) commitAlone(ctx context.Context, w *registration) (committed, error) {
	s.commitBatch(ctx, []*registration{w})
	r := <-w.done
	return r, r.err
}

// runCommitter writes the queued registrations in batches until ctx ends; those still queued
// then are told the store stopped.
func (s *Store) runCommitter(ctx context.Context) {
	c := s.commits
	close(c.running)
	defer close(c.stopped)
	var carry *registration // a registration of an instance the batch already held
	batch := make([]*registration, 0, commitBatch)
	keys := make(map[string]struct{}, commitBatch)
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case <-ctx.Done():
				for {
					select {
					case w := <-c.queue:
						w.done <- committed{err: errStopped}
					default:
						return
					}
				}
			case first = <-c.queue:
			}
		}
		batch = append(batch[:0], first)
		clear(keys)
		keys[first.key] = struct{}{}
	fill:
		for len(batch) < commitBatch {
			select {
			case w := <-c.queue:
				if _, twice := keys[w.key]; twice {
					carry = w
					break fill
				}
				keys[w.key] = struct{}{}
				batch = append(batch, w)
			default:
				break fill
			}
		}
		s.commitBatch(ctx, batch)
	}
}

// commitBatch writes batch in one transaction and tells each registration its outcome.
func (s *Store) commitBatch(ctx context.Context, batch []*registration) {
	// The batch may take as long as its most patient registration: one near its deadline
	// must not fail the others (it stops waiting by itself).
	deadline, bounded := time.Time{}, true
	ops := make([]clientv3.Op, 0, len(registration{}.ops)*len(batch))
	for _, w := range batch {
		bounded = bounded && !w.deadline.IsZero()
		if w.deadline.After(deadline) {
			deadline = w.deadline
		}
		ops = append(ops, w.ops[:]...)
	}
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	s.hold(batch)
	resp, err := s.cfg.Client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		s.drop(batch)
		for _, w := range batch {
			w.done <- committed{err: err}
		}
		return
	}
	rev := resp.Header.Revision
	s.settle(batch, rev)
	for i, w := range batch {
		w.done <- committed{rev: rev, prev: resp.Responses[len(w.ops)*i+putOp].GetResponsePut().GetPrevKv()}
	}
}

// What the watch brings back of this replica's own registrations. etcd sends a write's watch
// event before it answers the transaction, so the watch usually brings a registration in
// before its commit returns. The view then takes the registry's own record (the one the
// commit would have put) instead of decoding the record's JSON into a copy that the commit
// replaced at once. A registration is held from before its transaction is sent until its
// outcome is known, found by its lease (each registration has a lease of its own, so an
// earlier incarnation's write, even of the same value, is never taken for it: ownWrites,
// which matches values, would). Whichever of the watch and the commit comes first dates the
// record with the batch's revision and puts it in the view; the other finds it there. The
// view itself says which came first: after a resync it holds a copy decoded from etcd, over
// which the commit puts the registry's record again.

// hold holds the registrations of batch until settle or drop.
func (s *Store) hold(batch []*registration) {
	s.pendingM.Lock()
	defer s.pendingM.Unlock()
	for _, w := range batch {
		s.pending[w.lease] = w
	}
}

// inView reports whether the view holds w's record, the registry's own.
func (s *Store) inView(w *registration) bool {
	cur, ok := s.index.Get(w.rec.InstanceID)
	return ok && cur == w.rec
}

// install dates w's record with rev, the revision of its transaction, and puts it in the
// view with put. Called with s.pendingM held, by the first of the watch and the commit, or by
// the commit again after a resync.
func (s *Store) install(w *registration, rev int64, put func(*registry.Record, int64)) {
	if w.rec.Generation != rev {
		w.rec.Generation = rev // once: put again after a resync, the record was read elsewhere
	}
	s.leases.Store(w.rec.InstanceID, w.lease)
	put(w.rec, rev)
}

// settle stops holding the registrations of a batch committed at rev, putting in the view
// those it does not hold: read your own writes; the revision readers see follows the watch
// (storeindex.Index.PutAhead).
func (s *Store) settle(batch []*registration, rev int64) {
	s.pendingM.Lock()
	defer s.pendingM.Unlock()
	for _, w := range batch {
		delete(s.pending, w.lease)
		if !s.inView(w) {
			s.install(w, rev, s.index.PutAhead)
		}
	}
}

// drop stops holding the registrations of a batch whose transaction failed. etcd may have
// written it all the same (an answer lost, a deadline passed): a record the watch brought in
// stays in the view, as any write the watch brings does, until the lease the registration
// revokes takes it out, and the registry is told of it as of a write made elsewhere.
func (s *Store) drop(batch []*registration) {
	s.pendingM.Lock()
	var seen []string
	for _, w := range batch {
		delete(s.pending, w.lease)
		if s.inView(w) {
			seen = append(seen, w.rec.InstanceID)
		}
	}
	s.pendingM.Unlock()
	for _, id := range seen {
		s.changed(id)
	}
}

// own puts in the view the registration of this replica that kv is the write of, if it is
// held, and reports whether kv was one. Called by the watch, before the revision moves to
// kv's.
func (s *Store) own(kv *mvccpb.KeyValue) bool {
	s.pendingM.Lock()
	defer s.pendingM.Unlock()
	w, ok := s.pending[clientv3.LeaseID(kv.Lease)]
	if !ok || w.key != string(kv.Key) {
		return false
	}
	s.install(w, kv.ModRevision, func(rec *registry.Record, rev int64) { s.index.PutNewer(rec, rev) })
	return true
}
