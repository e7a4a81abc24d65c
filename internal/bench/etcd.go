package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdTarget drives a raw etcd with the registry's workload, as a service registry on etcd
// does it: registration = a lease and a put of the instance's document under it, heartbeat =
// one keep-alive of the lease, discovery = a range over the service's prefix (linearizable,
// the client's default), deregistration = revoking the lease, watch = a watch of the prefix.
type etcdTarget struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64 // seconds

	// the watch of the propagation phase, kept open across its changes
	wch      clientv3.WatchChan
	wservice string
	wcancel  context.CancelFunc
}

func newEtcdTarget(ctx context.Context, cfg RegistryConfig) (*etcdTarget, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Get(c, cfg.EtcdPrefix+"ready"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v: %w", cfg.EtcdEndpoints, err)
	}
	return &etcdTarget{cli: cli, prefix: cfg.EtcdPrefix, ttl: int64(cfg.EtcdTTL / time.Second)}, nil
}

func (e *etcdTarget) close() error {
	if e.wcancel != nil {
		e.wcancel()
	}
	return e.cli.Close()
}

func (e *etcdTarget) key(in *benchInstance) string { return e.prefix + in.service + "/" + in.id }

func (e *etcdTarget) register(ctx context.Context, in *benchInstance) error {
	lease, err := e.cli.Grant(ctx, e.ttl)
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if _, err := e.cli.Put(ctx, e.key(in), in.value, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	in.handle.Store(int64(lease.ID))
	return nil
}

func (e *etcdTarget) heartbeat(ctx context.Context, in *benchInstance) error {
	resp, err := e.cli.KeepAliveOnce(ctx, clientv3.LeaseID(in.handle.Load()))
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		return fmt.Errorf("lease %x ended", in.handle.Load())
	}
	return nil
}

func (e *etcdTarget) discover(ctx context.Context, service string) (int, error) {
	resp, err := e.cli.Get(ctx, e.prefix+service+"/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return len(resp.Kvs), nil
}

func (e *etcdTarget) deregister(ctx context.Context, in *benchInstance) error {
	_, err := e.cli.Revoke(ctx, clientv3.LeaseID(in.handle.Load()))
	return err
}

// watch arms one watch of the service's prefix the first time (as a registry client keeps
// one watch open) and returns a function that waits for its next event.
func (e *etcdTarget) watch(ctx context.Context, service string) (func() error, error) {
	if e.wch == nil || e.wservice != service {
		if e.wcancel != nil {
			e.wcancel()
		}
		wctx, cancel := context.WithCancel(ctx)
		wch := e.cli.Watch(clientv3.WithRequireLeader(wctx), e.prefix+service+"/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		select { // armed once etcd says the watch exists
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || !wr.Created {
				cancel()
				return nil, errors.Join(errors.New("etcd watch not created"), wr.Err())
			}
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
		e.wch, e.wservice, e.wcancel = wch, service, cancel
	}
	return func() error {
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		select {
		case wr, ok := <-e.wch:
			if !ok {
				e.wch = nil
				return errors.New("etcd watch closed without a change")
			}
			return wr.Err()
		case <-timeout.C:
			return errors.New("etcd watch saw no change within 30s")
		}
	}, nil
}
