package etcdstore

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

// fakeKeepAlive is a LeaseKeepAlive stream whose answers the test releases: each request's
// answer is its lease id times ten as the TTL (0 for lease 0: unknown), in request order.
type fakeKeepAlive struct {
	pb.Lease_LeaseKeepAliveClient // nil: only Send and Recv are used
	mu                            sync.Mutex
	sent                          []int64
	release                       chan struct{}   // one answer per receive
	broken                        chan struct{}   // closed: Recv fails
	closed                        <-chan struct{} // the stream's context ended: Recv fails
}

func (f *fakeKeepAlive) Send(req *pb.LeaseKeepAliveRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, req.ID)
	return nil
}

func (f *fakeKeepAlive) Recv() (*pb.LeaseKeepAliveResponse, error) {
	select {
	case <-f.broken:
		return nil, io.ErrUnexpectedEOF
	case <-f.closed:
		return nil, context.Canceled
	case <-f.release:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.sent[0]
	f.sent = f.sent[1:]
	return &pb.LeaseKeepAliveResponse{ID: id, TTL: id * 10}, nil
}

// allOpen reports whether every stream of r is open.
func allOpen(r *renewer) bool {
	for i := range r.streams {
		r.streams[i].mu.Lock()
		open := r.streams[i].stream != nil
		r.streams[i].mu.Unlock()
		if !open {
			return false
		}
	}
	return true
}

// TestRenewalsShareStreams: answers go to their callers in order, many callers on one
// stream; a stream that breaks tells its waiting callers; no stream open says so (the store
// then falls back to a stream of its own).
func TestRenewalsShareStreams(t *testing.T) {
	var mu sync.Mutex
	var opened []*fakeKeepAlive
	r := newRenewer(func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
		f := &fakeKeepAlive{release: make(chan struct{}), broken: make(chan struct{}), closed: ctx.Done()}
		mu.Lock()
		opened = append(opened, f)
		mu.Unlock()
		return f, nil
	})
	r.retry = time.Millisecond
	if _, err := r.renew(context.Background(), 1); !errors.Is(err, errRenewStreamDown) {
		t.Fatalf("renew before any stream is open = %v, want errRenewStreamDown", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()
	registrytest.Until(t, "every stream is open", func() bool { return allOpen(r) })
	mu.Lock()
	first := append([]*fakeKeepAlive(nil), opened...)
	mu.Unlock()

	// Eight concurrent renewals, two per stream; every stream answers its two in order.
	type answer struct {
		id, ttl int64
		err     error
	}
	answers := make(chan answer, 8)
	for id := int64(1); id <= 8; id++ {
		go func() {
			ttl, err := r.renew(context.Background(), clientv3.LeaseID(id))
			answers <- answer{id, ttl, err}
		}()
	}
	registrytest.Until(t, "all eight are sent", func() bool {
		n := 0
		for _, f := range first {
			f.mu.Lock()
			n += len(f.sent)
			f.mu.Unlock()
		}
		return n == 8
	})
	for _, f := range first {
		f.mu.Lock()
		n := len(f.sent)
		f.mu.Unlock()
		for range n {
			f.release <- struct{}{}
		}
	}
	for range 8 {
		a := <-answers
		if a.err != nil || a.ttl != a.id*10 {
			t.Errorf("renewal of lease %d: ttl %d, err %v; want its own answer (ttl %d)", a.id, a.ttl, a.err, a.id*10)
		}
	}

	// A renewal waiting when its stream breaks is told, and the stream is opened again.
	st := &r.streams[(r.next.Load()+1)%renewStreams]
	st.mu.Lock()
	f := st.stream.(*fakeKeepAlive)
	st.mu.Unlock()
	got := make(chan error, 1)
	go func() { _, err := r.renew(context.Background(), 9); got <- err }()
	registrytest.Until(t, "the renewal is sent", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.sent) == 1 })
	close(f.broken)
	if err := <-got; err == nil || errors.Is(err, errRenewStreamDown) {
		t.Errorf("renewal on a stream that broke = %v, want the stream's error", err)
	}
	registrytest.Until(t, "the broken stream is opened again", func() bool { mu.Lock(); defer mu.Unlock(); return len(opened) > renewStreams })

	// A caller that stops waiting leaves; the answer that comes later goes nowhere, and the
	// next renewal on that stream gets its own.
	registrytest.Until(t, "every stream is open again", func() bool { return allOpen(r) })
	short, stop := context.WithCancel(context.Background())
	stop()
	if _, err := r.renew(short, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("renewal with a cancelled context = %v", err)
	}
	st = &r.streams[r.next.Load()%renewStreams]
	st.mu.Lock()
	f = st.stream.(*fakeKeepAlive)
	st.mu.Unlock()
	r.next.Add(renewStreams - 1) // the next renewal takes the same stream
	go func() { ttl, err := r.renew(context.Background(), 4); answers <- answer{4, ttl, err} }()
	registrytest.Until(t, "both are sent", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.sent) == 2 })
	f.release <- struct{}{}
	f.release <- struct{}{}
	if a := <-answers; a.err != nil || a.ttl != 40 {
		t.Errorf("the renewal after an abandoned one: ttl %d, err %v; want its own ttl 40", a.ttl, a.err)
	}
}

// TestRenewalsOverStreamsAgainstEtcd: against a real etcd, a renewal over a stream extends
// the lease, and a lease etcd does not know is ErrLeaseNotFound (as KeepAliveOnce says it).
func TestRenewalsOverStreamsAgainstEtcd(t *testing.T) {
	cli := etcdtest.Start(t).Client
	s := &Store{cfg: Config{Client: cli}, renewer: newRenewer(leaseStreams(cli))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.renewer.run(ctx) }()
	defer func() { cancel(); <-done }()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "a renewal goes over a stream", func() bool {
		_, err := s.renewer.renew(ctx, lease.ID)
		return err == nil
	})
	if err := s.renewLease(ctx, lease.ID); err != nil {
		t.Errorf("renewing a live lease: %v", err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.renewLease(ctx, lease.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("renewing a revoked lease = %v, want ErrLeaseNotFound", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	var wg sync.WaitGroup
	for range 64 { // many at once, on four streams
		wg.Go(func() {
			if err := s.renewLease(rctx, lease.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				t.Errorf("concurrent renewal of a revoked lease = %v", err)
			}
		})
	}
	wg.Wait()
}
