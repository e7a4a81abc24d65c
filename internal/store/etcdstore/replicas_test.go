package etcdstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestReplicasAgree: two replicas over one etcd cluster number the same state alike (etcd's
// revision, verdicts written through etcd), so a consumer that fails over keeps following;
// a newly elected replica takes over the published verdicts instead of re-admitting every
// instance from unknown; a replica started later answers the elected one's verdicts at once.
func TestReplicasAgree(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/agree%d/", prefixes.Add(1))
	provider := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer provider.Close()
	a, stopA := startReplica(t, cli, prefix, "a")
	b, stopB := startReplica(t, cli, prefix, "b")
	registrytest.Until(t, "one replica is elected", func() bool { return a.Leader() != b.Leader() })
	leader, follower, stopLeader := a, b, stopA
	if b.Leader() {
		leader, follower, stopLeader = b, a, stopB
	}
	const n = 4
	for i := range n {
		id := fmt.Sprintf("jms-%d", i)
		req := &apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: provider.URL, Zone: "a",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}},
			Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: id, Version: "1.0.0"},
				Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "1s", UnhealthyAfter: apiv1.Int(2)}}}
		through := []*registry.Registry{a, b}[i%2]
		if _, err := through.Register(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	type view struct {
		Revision int64
		Entries  []string
	}
	answer := func(r *registry.Registry) view {
		ans := r.Query(&registry.Query{})
		v := view{Revision: ans.Revision}
		for _, e := range ans.Entries {
			v.Entries = append(v.Entries, fmt.Sprintf("%s %s %d", e.Record.InstanceID, e.Eligibility, e.Weight))
		}
		return v
	}
	registrytest.Until(t, "every instance serving on both replicas", func() bool {
		for _, r := range []*registry.Registry{leader, follower} {
			ans := r.Query(&registry.Query{})
			if len(ans.Entries) != n {
				return false
			}
			for _, e := range ans.Entries {
				if e.Eligibility != apiv1.EligibilityServing {
					return false
				}
			}
		}
		return true
	})
	// Settled, both replicas answer the same revision with the same entries.
	var va, vb view
	registrytest.Until(t, "both replicas at one revision", func() bool {
		va, vb = answer(leader), answer(follower)
		return va.Revision == vb.Revision
	})
	if diff := cmp.Diff(va, vb); diff != "" {
		t.Fatalf("the replicas answer one revision differently (-elected +other):\n%s", diff)
	}

	// A replica started now answers the published verdicts from its first sweep, not unknown.
	c, _ := startReplica(t, cli, prefix, "c")
	registrytest.Until(t, "the new replica holds the fleet", func() bool { return len(c.Catalog().Instances) == n })
	registrytest.Until(t, "the new replica has swept once", func() bool { _, err := c.Explain("jms-0"); return err == nil })
	for i := range n {
		if ex, err := c.Explain(fmt.Sprintf("jms-%d", i)); err != nil || ex.State != apiv1.EligibilityServing {
			t.Errorf("a replica started after the verdicts: jms-%d %s %v, want serving", i, ex.State, err)
		}
	}

	// The elected replica goes; another takes over without withdrawing anyone, and keeps
	// numbering above what consumers saw.
	seen := va.Revision
	stopLeader()
	var next *registry.Registry
	registrytest.Until(t, "another replica elected", func() bool {
		for _, r := range []*registry.Registry{follower, c} {
			if r.Leader() {
				next = r
				return true
			}
		}
		return false
	})
	for range 20 { // two probe intervals' worth of sweeps after the election
		v := answer(next)
		if len(v.Entries) != n || v.Revision < seen {
			t.Fatalf("after the failover the new elected replica answers %+v (consumers saw revision %d): want all %d in rotation", v, seen, n)
		}
		for _, e := range v.Entries {
			if e != fmt.Sprintf("%s serving 100", e[:5]) {
				t.Fatalf("after the failover: %q, want serving at 100", e)
			}
		}
		time.Sleep(100 * time.Millisecond) // watching, not timing: a slower machine only watches longer
	}
}

// TestWarmUpRemovalsFromAnotherReplica: while the replicas warm up, an instance deregistered
// through one replica is listed as removed by the other too, in the answers about its
// service and about every service, and not in the answers about another service.
func TestWarmUpRemovalsFromAnotherReplica(t *testing.T) {
	ctx := context.Background()
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/removals%d/", prefixes.Add(1))
	a, _ := startReplica(t, cli, prefix, "a")
	b, _ := startReplica(t, cli, prefix, "b")
	register := func(id, service string) *apiv1.RegisterResponse {
		t.Helper()
		resp, err := a.Register(ctx, &apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080", Zone: "a",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	gone := register("jms-1", "egress-jms")
	register("rabbit-1", "egress-rabbitmq")
	registrytest.Until(t, "the other replica holds both instances", func() bool { return len(b.Query(&registry.Query{}).Entries) == 2 })
	if err := a.Deregister(ctx, "jms-1", gone.Generation); err != nil {
		t.Fatal(err)
	}
	want := []apiv1.Removal{{InstanceID: "jms-1", Generation: gone.Generation}}
	registrytest.Until(t, "the other replica lists the removal", func() bool {
		return len(b.Query(&registry.Query{ServiceName: "egress-jms"}).Removed) > 0
	})
	if ans := b.Query(&registry.Query{}); ans.Complete {
		t.Fatal("the replica's answer is complete: no warm-up to test")
	}
	for _, tc := range []struct {
		q    registry.Query
		want []apiv1.Removal
	}{
		{registry.Query{ServiceName: "egress-jms"}, want},
		{registry.Query{}, want},
		{registry.Query{ServiceName: "egress-rabbitmq"}, nil},
	} {
		if diff := cmp.Diff(tc.want, b.Query(&tc.q).Removed); diff != "" {
			t.Errorf("service %q: removed (-want +got):\n%s", tc.q.ServiceName, diff)
		}
	}
}
