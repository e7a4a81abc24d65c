package etcdstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

// cluster is a three-member etcd cluster in this process.
type cluster struct {
	members   []*embed.Etcd
	endpoints []string
}

// startCluster starts the cluster, again on other ports should another process take one
// between freeport's probe and etcd's bind (freeport.Retry).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	var c *cluster
	err := freeport.Retry(func() error {
		var err error
		c, err = tryStartCluster(t)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tryStartCluster(t *testing.T) (*cluster, error) {
	t.Helper()
	const n = 3
	names := make([]string, n)
	cus, pus := make([]url.URL, n), make([]url.URL, n)
	var initial []string
	for i := range n {
		names[i] = fmt.Sprintf("m%d", i)
		cus[i], pus[i] = *etcdtest.LoopbackURL(t), *etcdtest.LoopbackURL(t)
		initial = append(initial, names[i]+"="+pus[i].String())
	}
	c := &cluster{members: make([]*embed.Etcd, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		cfg := etcdtest.Config(t, names[i], cus[i], pus[i])
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "meshflows-test"
		c.endpoints = append(c.endpoints, cus[i].String())
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			c.members[i], errs[i] = e, err
		})
	}
	wg.Wait()
	closeAll := func() {
		for _, m := range c.members {
			if m != nil {
				m.Close()
			}
		}
	}
	for i, err := range errs {
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
	}
	t.Cleanup(closeAll)
	for _, m := range c.members {
		select {
		case <-m.Server.ReadyNotify():
		case <-time.After(60 * time.Second):
			t.Fatal("cluster not ready")
		}
	}
	return c, nil
}

// leader returns the index of the member that leads, or -1.
func (c *cluster) leader() int {
	for i, m := range c.members {
		if m != nil && m.Server.Leader() == m.Server.MemberID() {
			return i
		}
	}
	return -1
}

func (c *cluster) kill(i int) {
	c.members[i].Close()
	c.members[i] = nil
}

// TestClusterFailures: with a three-member cluster, a follower or the leader dies while
// registrations go on; no acknowledged registration is lost, and after the leader's death
// registrations resume once etcd has elected another.
func TestClusterFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three-member etcd clusters")
	}
	for _, victim := range []string{"follower", "leader"} {
		t.Run(victim, func(t *testing.T) {
			c := startCluster(t)
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			s := newStore(t, cli, time.Minute)
			acked := map[string]int64{}
			register := func(id string) {
				deadline := time.Now().Add(30 * time.Second)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					rec := record(id)
					err := s.Register(ctx, rec)
					cancel()
					if err == nil {
						acked[id] = rec.Generation
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("register %s: %v", id, err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			for i := range 20 {
				register(fmt.Sprintf("before-%d", i))
			}
			lead := c.leader()
			if lead < 0 {
				t.Fatal("no leader")
			}
			if victim == "leader" {
				c.kill(lead)
			} else {
				c.kill((lead + 1) % 3)
			}
			start := time.Now()
			register("first-after")
			t.Logf("first registration after the %s died took %s", victim, time.Since(start).Round(time.Millisecond))
			for i := range 20 {
				register(fmt.Sprintf("after-%d", i))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatalf("read after the failure: %v", err)
			}
			have := map[string]int64{}
			for _, kv := range resp.Kvs {
				if i := strings.Index(string(kv.Key), "/instances/"); i >= 0 {
					have[string(kv.Key)[i+len("/instances/"):]] = kv.ModRevision
				}
			}
			for id, gen := range acked {
				if have[id] != gen {
					t.Errorf("acknowledged registration %s (generation %d) is lost", id, gen)
				}
			}
		})
	}
}
