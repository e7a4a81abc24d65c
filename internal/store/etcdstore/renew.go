package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Heartbeats renew leases over a few long-lived LeaseKeepAlive streams instead of opening a
// stream per renewal (what clientv3's KeepAliveOnce does): a heartbeat sends one request on
// a stream and waits for its answer. etcd answers the requests of one stream in the order it
// received them (it renews, then sends, one request at a time), so each stream keeps the
// callers waiting in a queue and hands each answer to the oldest.

// renewStreams is how many streams carry renewals: enough that one slow renewal does not
// hold up the others for long, few enough to cost nothing idle.
const renewStreams = 4

// renewRetry is the pause before a broken stream is opened again.
const renewRetry = 500 * time.Millisecond

// errRenewStreamDown says no stream is open; the caller falls back to KeepAliveOnce.
var errRenewStreamDown = errors.New("renewal stream not open")

// renewAnswer is what a renewal's caller is told: the lease's new TTL (0 when etcd does not
// know the lease), or why the stream broke.
type renewAnswer struct {
	ttl int64
	err error
}

// renewer owns the renewal streams.
type renewer struct {
	open    func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error)
	retry   time.Duration // the pause before a broken stream is opened again
	streams [renewStreams]renewStream
	next    atomic.Uint32
}

// renewStream is one LeaseKeepAlive stream and the callers waiting on its answers, oldest
// first.
type renewStream struct {
	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient // nil while closed
	waiting []chan renewAnswer
	head    int // waiting[head:] wait
}

// newRenewer returns a renewer whose streams open with open; run opens them.
func newRenewer(open func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error)) *renewer {
	return &renewer{open: open, retry: renewRetry}
}

// leaseStreams opens LeaseKeepAlive streams on the client's connection (with its credentials
// and its leader requirement).
func leaseStreams(c *clientv3.Client) func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
	return func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
		return pb.NewLeaseClient(c.ActiveConnection()).LeaseKeepAlive(clientv3.WithRequireLeader(ctx))
	}
}

// run keeps every stream open until ctx ends, reopening a broken one after a pause; callers
// waiting on a stream that breaks are told so.
func (r *renewer) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.streams {
		wg.Go(func() { r.streams[i].run(ctx, r.open, r.retry) })
	}
	wg.Wait()
}

// renew renews lease id and returns its new TTL in seconds (0: etcd does not know it), or
// errRenewStreamDown when no stream is open.
func (r *renewer) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	st := &r.streams[r.next.Add(1)%renewStreams]
	ch, err := st.send(id)
	if err != nil {
		return 0, err
	}
	select {
	case a := <-ch:
		return a.ttl, a.err
	case <-ctx.Done():
		return 0, ctx.Err() // the answer, when it comes, lands in ch's buffer
	}
}

// send queues a request for id and returns where its answer will come.
func (st *renewStream) send(id clientv3.LeaseID) (<-chan renewAnswer, error) {
	ch := make(chan renewAnswer, 1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stream == nil {
		return nil, errRenewStreamDown
	}
	// Sent and queued under one lock, so that the queue is in the order etcd receives them.
	if err := st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		return nil, fmt.Errorf("%w: %w", errRenewStreamDown, err)
	}
	st.waiting = append(st.waiting, ch)
	return ch, nil
}

// run opens the stream and hands out its answers until ctx ends.
func (st *renewStream) run(ctx context.Context, open func(context.Context) (pb.Lease_LeaseKeepAliveClient, error), retry time.Duration) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := open(sctx)
		if err == nil {
			st.mu.Lock()
			st.stream = stream
			st.mu.Unlock()
			err = st.receive(stream)
			st.close(err)
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// receive hands each answer to the oldest waiting caller until the stream breaks.
func (st *renewStream) receive(stream pb.Lease_LeaseKeepAliveClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		st.mu.Lock()
		if st.head == len(st.waiting) {
			st.mu.Unlock()
			return errors.New("an answer nobody asked for")
		}
		ch := st.waiting[st.head]
		st.waiting[st.head] = nil
		st.head++
		if st.head == len(st.waiting) {
			st.waiting, st.head = st.waiting[:0], 0
		}
		st.mu.Unlock()
		ch <- renewAnswer{ttl: resp.TTL}
	}
}

// close marks the stream closed and tells every waiting caller why.
func (st *renewStream) close(err error) {
	if err == nil {
		err = errors.New("stream ended")
	}
	st.mu.Lock()
	st.stream = nil
	waiting := st.waiting[st.head:]
	st.waiting, st.head = nil, 0
	st.mu.Unlock()
	for _, ch := range waiting {
		ch <- renewAnswer{err: fmt.Errorf("etcd keep-alive stream: %w", err)}
	}
}

// renewLease renews a lease: over a renewal stream when one is open, else with a stream of
// its own. A lease etcd does not know is rpctypes.ErrLeaseNotFound, as KeepAliveOnce says.
func (s *Store) renewLease(ctx context.Context, id clientv3.LeaseID) error {
	ttl, err := s.renewer.renew(ctx, id)
	if errors.Is(err, errRenewStreamDown) {
		_, err = s.cfg.Client.KeepAliveOnce(ctx, id)
		return err
	}
	if err != nil {
		return err
	}
	if ttl <= 0 {
		return rpctypes.ErrLeaseNotFound
	}
	return nil
}
