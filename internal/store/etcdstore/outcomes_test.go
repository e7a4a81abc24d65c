package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
)

// TestForwardedOutcomesGoWithTheirGateway: a window of outcomes forwarded through etcd is
// put under the lease of its gateway's acknowledgement, so that it goes when the gateway
// stops acknowledging; before the gateway's first acknowledgement, and once that lease has
// ended, under a lease of its own that ends by itself. Without a lease every gateway that
// ever reported stayed in etcd for good. Every window still reaches the watchers.
func TestForwardedOutcomesGoWithTheirGateway(t *testing.T) {
	ctx := context.Background()
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/outcomes%d/", prefixes.Add(1))
	s := runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	seen := make(chan string, 8)
	s.OnOutcomes(func(r *apiv1.OutcomesRequest) { seen <- r.GatewayID })
	leaseOf := func(t *testing.T, key string) (clientv3.LeaseID, bool) {
		t.Helper()
		resp, err := cli.Get(ctx, prefix+key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0, false
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease), true
	}
	forward := func(t *testing.T, gw string) clientv3.LeaseID {
		t.Helper()
		if err := s.ForwardOutcomes(ctx, &apiv1.OutcomesRequest{GatewayID: gw, Outcomes: []apiv1.Outcome{}}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-seen:
			if got != gw {
				t.Fatalf("the watch brought the window of %q, want %q", got, gw)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the window of %q never reached the watch", gw)
		}
		l, ok := leaseOf(t, "outcomes/"+gw)
		if !ok {
			t.Fatalf("no outcomes key of %q", gw)
		}
		if l == 0 {
			t.Fatalf("the outcomes of %q are under no lease: they would stay in etcd for good", gw)
		}
		return l
	}

	t.Run("before any acknowledgement", func(t *testing.T) {
		l := forward(t, "gw-early")
		ttl, err := cli.TimeToLive(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 0 || ttl.TTL > 60 {
			t.Errorf("the outcomes' own lease has %d s left, want (0, 60]", ttl.TTL)
		}
	})

	t.Run("with the gateway's acknowledgement", func(t *testing.T) {
		if err := s.PutAck(ctx, registry.GatewayAck{GatewayID: "gw-1", Seen: time.Now()}, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		ack, ok := leaseOf(t, "gateways/gw-1")
		if !ok || ack == 0 {
			t.Fatalf("the acknowledgement has no lease (found %v)", ok)
		}
		if l := forward(t, "gw-1"); l != ack {
			t.Fatalf("the outcomes are under lease %x, want the acknowledgement's %x", l, ack)
		}
		// The gateway stops acknowledging: its lease ends, and its outcomes go with it.
		if _, err := cli.Revoke(ctx, ack); err != nil {
			t.Fatal(err)
		}
		if _, ok := leaseOf(t, "outcomes/gw-1"); ok {
			t.Fatal("the outcomes outlived their gateway's acknowledgement")
		}
		// A window forwarded after that (the store may not have seen the lease end yet) is
		// put under a lease of its own.
		if l := forward(t, "gw-1"); l == ack {
			t.Fatalf("the outcomes are under the ended lease %x", l)
		}
	})
}
