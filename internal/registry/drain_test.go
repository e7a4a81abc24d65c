package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// TestWarmUpAnswersListRemovals: while the registry warms up, every answer lists the
// incarnations deregistered in its epoch; once complete, none.
func TestWarmUpAnswersListRemovals(t *testing.T) {
	f := newFixture(t, registry.Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	mustRegister(t, f, request("jms-1", "egress-jms"))
	// a route input: the routes answer lists the removals of route inputs
	gone := mustRegister(t, f, request("jms-2", "egress-jms", capability("messaging.publish", "jms", "1.0.0", `{"public_paths":["/api/jms"]}`)))
	mustRegister(t, f, request("jms-3", "egress-jms"))
	if err := f.reg.Deregister(context.Background(), "jms-2", gone.Generation); err != nil {
		t.Fatal(err)
	}
	// (No lease granted in an epoch can end inside its warm-up, which is one lease TTL long:
	// deregistrations are the removals of a warm-up.)
	f.clock.Advance(29 * time.Second)
	want := []apiv1.Removal{{InstanceID: "jms-2", Generation: gone.Generation}}
	ans := f.reg.Query(&registry.Query{})
	if ans.Complete || len(ans.Entries) != 2 {
		t.Fatalf("answer in the warm-up: complete %v, %d entries", ans.Complete, len(ans.Entries))
	}
	if diff := cmp.Diff(want, ans.Removed); diff != "" {
		t.Errorf("query removed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.reg.Routes().Removed); diff != "" {
		t.Errorf("routes removed (-want +got):\n%s", diff)
	}
	f.clock.Advance(time.Second)
	if ans := f.reg.Query(&registry.Query{}); !ans.Complete || ans.Removed != nil {
		t.Errorf("complete answer: complete %v, removed %v; want none", ans.Complete, ans.Removed)
	}
}

// TestWarmUpRemovalsByService: an answer about one service lists the removals of that
// service's instances only; an answer about every service lists them all, the routes answer those of route inputs,
// one per instance at its highest generation, and a removal made after such an answer is in
// the next one.
func TestWarmUpRemovalsByService(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	deregister := func(id string, generation int64) {
		t.Helper()
		if err := f.reg.Deregister(ctx, id, generation); err != nil {
			t.Fatal(err)
		}
	}
	mustRegister(t, f, request("jms-1", "egress-jms"))
	jms2 := mustRegister(t, f, request("jms-2", "egress-jms"))
	mustRegister(t, f, request("rabbit-1", "egress-rabbitmq"))
	rabbit2 := mustRegister(t, f, request("rabbit-2", "egress-rabbitmq"))
	deregister("jms-2", jms2.Generation)
	deregister("rabbit-2", rabbit2.Generation)
	// An instance id that moves to another service keeps its removal in the answers of both.
	moved := mustRegister(t, f, request("jms-2", "egress-rabbitmq"))
	all := func() []apiv1.Removal { return f.reg.Query(&registry.Query{}).Removed }
	if diff := cmp.Diff([]apiv1.Removal{{InstanceID: "jms-2", Generation: jms2.Generation}, {InstanceID: "rabbit-2", Generation: rabbit2.Generation}}, all()); diff != "" {
		t.Errorf("every service (-want +got):\n%s", diff)
	}
	deregister("jms-2", moved.Generation)

	for _, tc := range []struct {
		name string
		got  []apiv1.Removal
		want []apiv1.Removal
	}{
		{"egress-jms", f.reg.Query(&registry.Query{ServiceName: "egress-jms"}).Removed,
			[]apiv1.Removal{{InstanceID: "jms-2", Generation: jms2.Generation}}},
		{"egress-rabbitmq", f.reg.Query(&registry.Query{ServiceName: "egress-rabbitmq", CapabilityID: "messaging.publish"}).Removed,
			[]apiv1.Removal{{InstanceID: "jms-2", Generation: moved.Generation}, {InstanceID: "rabbit-2", Generation: rabbit2.Generation}}},
		{"a service with no removal", f.reg.Query(&registry.Query{ServiceName: "egress-webhook"}).Removed, nil},
		{"every service", all(),
			[]apiv1.Removal{{InstanceID: "jms-2", Generation: moved.Generation}, {InstanceID: "rabbit-2", Generation: rabbit2.Generation}}},
		// the routes answer lists the removals of route inputs alone: none of these is one
		{"routes", f.reg.Routes().Removed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWithdrawalNeedsEveryLiveGateway: a withdrawal is acknowledged only when every live
// gateway has applied it and the registry has run long enough to know every live gateway; a
// withdrawal this replica does not remember is judged at its current revision, never
// acknowledged early; one of an incarnation still registered is not found.
func TestWithdrawalNeedsEveryLiveGateway(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{GatewayTTL: 30 * time.Second})
	reg := mustRegister(t, f, request("jms-1", "egress-jms"))
	if err := f.reg.Deregister(ctx, "jms-1", reg.Generation); err != nil {
		t.Fatal(err)
	}
	st := f.reg.State()
	w, err := f.reg.Withdrawal("jms-1", reg.Generation)
	if err != nil || w.Acknowledged || w.Reason == "" {
		t.Fatalf("just started, no gateway heard: %+v %v; want not acknowledged, with a reason", w, err)
	}
	f.clock.Advance(30 * time.Second)
	if w, _ := f.reg.Withdrawal("jms-1", reg.Generation); !w.Acknowledged {
		t.Fatalf("after the gateway ttl, no gateway live: %+v; want acknowledged", w)
	}
	ack := func(id string, rev int64) {
		t.Helper()
		if _, err := f.reg.Ack(ctx, &apiv1.AckRequest{GatewayID: id, RegistryEpoch: st.Epoch, Revision: rev}); err != nil {
			t.Fatal(err)
		}
	}
	ack("gw-1", st.Revision-1)
	ack("gw-2", st.Revision)
	w, _ = f.reg.Withdrawal("jms-1", reg.Generation)
	if w.Acknowledged || cmp.Diff([]string{"gw-1"}, w.Pending) != "" {
		t.Fatalf("gw-1 behind: %+v; want pending gw-1", w)
	}
	ack("gw-1", st.Revision)
	if w, _ := f.reg.Withdrawal("jms-1", reg.Generation); !w.Acknowledged {
		t.Fatalf("both applied: %+v", w)
	}
	f.clock.Advance(20 * time.Second)
	ack("gw-2", st.Revision)
	f.clock.Advance(11 * time.Second) // gw-1 silent for 31 s: no longer live
	mustRegister(t, f, request("jms-9", "egress-jms"))
	// unknown to this replica (deregistered through another): judged at the current revision
	w, err = f.reg.Withdrawal("jms-7", 4)
	if err != nil || w.Acknowledged || w.Revision != f.reg.State().Revision || cmp.Diff([]string{"gw-2"}, w.Pending) != "" {
		t.Fatalf("unremembered withdrawal: %+v %v; want judged at revision %d, gw-2 pending", w, err, f.reg.State().Revision)
	}
	if _, err := f.reg.Withdrawal("jms-9", 2); !errors.Is(err, registry.ErrInstanceNotFound) {
		t.Fatalf("withdrawal of a registered incarnation: %v, want not found", err)
	}
}

// TestWarmUpRemovalsByCapabilityBoundedAndAged: an answer about a capability (and no
// service) lists that capability's removals only; an answer lists the newest
// MaxRemovedPerAnswer removals at most; a removal ages out RemovalKeep after it was made,
// while the warm-up goes on.
func TestWarmUpRemovalsByCapabilityBoundedAndAged(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{LeaseTTL: 30 * time.Minute, HeartbeatInterval: 30 * time.Second})
	n := registry.MaxRemovedPerAnswer + 5
	gens := make([]int64, n)
	for i := range n {
		gens[i] = mustRegister(t, f, request(fmt.Sprintf("jms-%04d", i), "egress-jms")).Generation
	}
	db := mustRegister(t, f, request("db-1", "orders-db", capability("orders.read", "db", "1.0.0", `{"public_paths":["/api/orders"]}`)))
	for i := range n {
		if err := f.reg.Deregister(ctx, fmt.Sprintf("jms-%04d", i), gens[i]); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(time.Minute)
	if err := f.reg.Deregister(ctx, "db-1", db.Generation); err != nil {
		t.Fatal(err)
	}
	if got := f.reg.Query(&registry.Query{CapabilityID: "orders.read"}).Removed; !cmp.Equal(got, []apiv1.Removal{{InstanceID: "db-1", Generation: db.Generation}}) {
		t.Errorf("orders.read lists %v, want db-1 alone", got)
	}
	pub := f.reg.Query(&registry.Query{CapabilityID: "messaging.publish"}).Removed
	if len(pub) != registry.MaxRemovedPerAnswer || pub[0].InstanceID != "jms-0005" || pub[len(pub)-1].InstanceID != fmt.Sprintf("jms-%04d", n-1) {
		t.Errorf("messaging.publish lists %d removals from %v, want the newest %d (jms-0005 on)", len(pub), pub[:1], registry.MaxRemovedPerAnswer)
	}
	f.clock.Advance(registry.RemovalKeep - time.Minute)
	if _, err := f.reg.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.reg.Query(&registry.Query{ServiceName: "egress-jms"}).Removed; got != nil {
		t.Errorf("egress-jms lists %d removals after %v, want none", len(got), registry.RemovalKeep)
	}
	if got := f.reg.Routes().Removed; !cmp.Equal(got, []apiv1.Removal{{InstanceID: "db-1", Generation: db.Generation}}) {
		t.Errorf("routes list %v, want db-1 alone (a route input, a minute younger)", got)
	}
	if st := f.reg.State(); st.Complete {
		t.Fatal("the warm-up is over: the test needs it going on")
	}
}
