package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

// TestClusterFailures: with a three-member cluster, a follower or the leader dies while
// registrations go on; no acknowledged registration is lost, and after the leader's death
// registrations resume once etcd has elected another.
func TestClusterFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three-member etcd clusters")
	}
	for _, victim := range []string{"follower", "leader"} {
		t.Run(victim, func(t *testing.T) {
			c := etcdtest.StartCluster(t, 3)
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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
			lead := c.Leader()
			if lead < 0 {
				t.Fatal("no leader")
			}
			if victim == "leader" {
				c.Kill(lead)
			} else {
				c.Kill((lead + 1) % 3)
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
