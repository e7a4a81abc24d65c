package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// TestWaitOnTopic: a long poll waits for a change of what it asked for. A change of one
// service (a registration, a deregistration, a lease's end, a self-report, a verdict) answers
// the polls on that service, on its capabilities and on the fleet, and never a poll on
// another service or capability; a change of the routes' inputs answers the routes' polls.
func TestWaitOnTopic(t *testing.T) {
	publish := apiv1.Capability{CapabilityID: "messaging.publish", Provider: "jms", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"}
	orders := apiv1.Capability{CapabilityID: "orders.read", Provider: "db", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"}
	routed := func(id, service string) *apiv1.RegisterRequest {
		return request(id, service, capability("orders.read", "db", "1.0.0", `{"public_paths": ["/api/`+id+`"]}`))
	}
	topics := []struct {
		name  string
		topic registry.Topic
	}{
		{"svc-a", registry.ServiceTopic("svc-a")},
		{"svc-b", registry.ServiceTopic("svc-b")},
		{"messaging.publish", registry.CapabilityTopic("messaging.publish")},
		{"orders.read", registry.CapabilityTopic("orders.read")},
		{"routes", registry.RoutesTopic},
		{"fleet", registry.Topic{}},
	}
	type fixtureOp = func(t *testing.T, f *fixture, gens map[string]int64)
	cases := []struct {
		name string
		op   fixtureOp
		want []string // the topics answered
	}{
		{"a registration in svc-a", func(t *testing.T, f *fixture, _ map[string]int64) {
			mustRegister(t, f, request("a-2", "svc-a", publish))
		}, []string{"svc-a", "messaging.publish", "fleet"}},
		{"a registration in svc-b", func(t *testing.T, f *fixture, _ map[string]int64) {
			mustRegister(t, f, request("b-2", "svc-b", publish))
		}, []string{"svc-b", "messaging.publish", "fleet"}},
		{"a re-registration that moves an instance to svc-b", func(t *testing.T, f *fixture, _ map[string]int64) {
			mustRegister(t, f, request("a-1", "svc-b", publish))
		}, []string{"svc-a", "svc-b", "messaging.publish", "fleet"}},
		{"a deregistration in svc-b during the warm-up", func(t *testing.T, f *fixture, gens map[string]int64) {
			if err := f.reg.Deregister(context.Background(), "b-1", gens["b-1"]); err != nil {
				t.Fatal(err)
			}
			// not a route input: the routes answer does not list it
		}, []string{"svc-b", "messaging.publish", "fleet"}},
		{"a self-report of failing in svc-b", func(t *testing.T, f *fixture, gens map[string]int64) {
			heartbeat(t, f, "b-1", gens["b-1"], "failing")
		}, []string{"svc-b", "messaging.publish", "fleet"}},
		{"a panic of messaging.publish in zone a", func(t *testing.T, f *fixture, gens map[string]int64) {
			heartbeat(t, f, "a-1", gens["a-1"], "failing")
			heartbeat(t, f, "b-1", gens["b-1"], "failing")
			if got := answer(f)["a-1"]; !strings.HasSuffix(got, "panic=true") {
				t.Fatalf("a-1 is answered %s, want its group in panic", got)
			}
			// a panic flag changes the entries of its group in every service: every poll
		}, []string{"svc-a", "svc-b", "messaging.publish", "orders.read", "routes", "fleet"}},
		{"a lease's end in svc-b", func(t *testing.T, f *fixture, gens map[string]int64) {
			for _, id := range []string{"a-1", "c-1", "r-1"} { // the others renew
				heartbeat(t, f, id, gens[id], "ok")
			}
			f.clock.Advance(60 * time.Second)
			for _, id := range []string{"a-1", "c-1", "r-1"} {
				heartbeat(t, f, id, gens[id], "ok")
			}
			// the index is taken after the renewals: only the sweep is looked at
		}, nil},
		{"a registration of a route input", func(t *testing.T, f *fixture, _ map[string]int64) {
			mustRegister(t, f, routed("r-2", "svc-r"))
		}, []string{"orders.read", "routes", "fleet"}},
		{"a registration in svc-c", func(t *testing.T, f *fixture, _ map[string]int64) {
			mustRegister(t, f, request("c-2", "svc-c", orders))
		}, []string{"orders.read", "fleet"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newJudgedFixture(t)
			gens := map[string]int64{}
			for _, req := range []*apiv1.RegisterRequest{request("a-1", "svc-a", publish), request("b-1", "svc-b", publish),
				request("c-1", "svc-c", orders), routed("r-1", "svc-r")} {
				gens[req.InstanceID] = mustRegister(t, f, req).Generation
			}
			f.clock.Advance(35 * time.Second) // past the slow start: no weight moves by itself
			f.reg.Sweep(context.Background())
			index := f.reg.State().Revision
			tc.op(t, f, gens)
			if tc.name == "a lease's end in svc-b" {
				index = f.reg.State().Revision
				f.clock.Advance(40 * time.Second) // b-1's lease ended 90 s after its last renewal
				if n, err := f.reg.Sweep(context.Background()); err != nil || n != 1 {
					t.Fatalf("Sweep = %d, %v; want b-1 evicted", n, err)
				}
				tc.want = []string{"svc-b", "messaging.publish", "fleet"}
			}
			if f.reg.State().Revision <= index {
				t.Fatalf("the change did not move the revision (%d)", index)
			}
			var got []string
			for _, tp := range topics {
				if f.reg.TopicChanged(tp.topic, index) {
					got = append(got, tp.name)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("answered %v, want %v", got, tc.want)
			}
			// and a poll at the revision now waits, on every topic
			for _, tp := range topics {
				if f.reg.TopicChanged(tp.topic, f.reg.State().Revision) {
					t.Errorf("%s: changed past the current revision", tp.name)
				}
			}
		})
	}
}

// TestWaitOnTopicWakesAndSleeps: a poll on a service whose answer is current parks even when
// another service changed past its index (a poll on the fleet would answer at once), and its
// own service's change answers it with the revision then.
func TestWaitOnTopicWakesAndSleeps(t *testing.T) {
	f := newJudgedFixture(t)
	mustRegister(t, f, request("a-1", "svc-a"))
	mustRegister(t, f, request("b-1", "svc-b"))
	index := f.reg.State().Revision
	mustRegister(t, f, request("b-2", "svc-b"))
	other := f.reg.State().Revision
	woke := make(chan int64, 1)
	go func() {
		woke <- f.reg.WaitOn(context.Background(), registry.ServiceTopic("svc-a"), "", index, time.Hour)
	}()
	for f.reg.Watchers() == 0 { // it parks, or it answered: one of the two comes
		select {
		case rev := <-woke:
			t.Fatalf("the poll on svc-a at %d was answered at %d for a change of svc-b", index, rev)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	mustRegister(t, f, request("a-2", "svc-a"))
	if rev := <-woke; rev <= other {
		t.Errorf("woke at revision %d, want past svc-b's change at %d", rev, other)
	}
	if f.reg.TopicChanged(registry.ServiceTopic("svc-a"), f.reg.State().Revision) {
		t.Error("svc-a changed past the current revision")
	}
}

// TestNoMissedWake: a long poll is answered whenever its answer changed. After every change
// of a random sequence (registrations, new incarnations, deregistrations, self-reports,
// passive outcomes, time that ramps, ejects, ends leases and the warm-up), a poll whose topic
// did not change past the revision of the answer it holds would still be holding the answer
// to its query now (leases aside): the registry never leaves a poll parked on a changed
// answer.
func TestNoMissedWake(t *testing.T) {
	caps := []apiv1.Capability{capability("messaging.publish", "jms", "1.0.0", ""), capability("messaging.publish", "rabbitmq", "2.0.0", `{"priority":3}`),
		capability("orders.read", "db", "1.0.0", `{"public_paths":["/api/orders"]}`)}
	type poll struct {
		q      *registry.Query
		topic  registry.Topic
		index  int64
		answer string
	}
	answerOf := func(f *fixture, q *registry.Query) string {
		var b strings.Builder
		for _, e := range f.reg.Query(q).Entries {
			w := e.Wire()
			w.LeaseExpiresAt = time.Time{}
			fmt.Fprintf(&b, "%+v\n", w)
		}
		return b.String()
	}
	rapid.Check(t, func(rt *rapid.T) {
		f := newJudgedFixture(t)
		ctx := context.Background()
		queries := []*registry.Query{{ServiceName: "svc-a"}, {ServiceName: "svc-b", IncludeAll: true}, {CapabilityID: "messaging.publish"},
			{CapabilityID: "orders.read", IncludeAll: true}, {}}
		polls := make([]*poll, len(queries))
		for i, q := range queries {
			polls[i] = &poll{q: q, topic: registry.TopicOf(q), index: f.reg.State().Revision, answer: answerOf(f, q)}
		}
		gens := map[string]int64{}
		ids := []string{"i-1", "i-2", "i-3", "i-4", "i-5"}
		rt.Repeat(map[string]func(*rapid.T){
			"register": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				req := request(id, rapid.SampledFrom([]string{"svc-a", "svc-b"}).Draw(rt, "service"))
				req.Zone = rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "zone")
				req.Capabilities = nil
				for _, c := range rapid.SliceOfNDistinct(rapid.IntRange(0, len(caps)-1), 1, len(caps), rapid.ID[int]).Draw(rt, "caps") {
					req.Capabilities = append(req.Capabilities, caps[c])
				}
				gens[id] = mustRegister(t, f, req).Generation
			},
			"deregister": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if g, ok := gens[id]; ok {
					if err := f.reg.Deregister(ctx, id, g); err != nil {
						rt.Fatal(err)
					}
					delete(gens, id)
				}
			},
			"self-report": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if g, ok := gens[id]; ok {
					if _, err := f.reg.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: g, Health: rapid.SampledFrom([]string{"ok", "degraded", "failing"}).Draw(rt, "health")}); err != nil {
						rt.Fatal(err)
					}
				}
			},
			"outcomes": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if g, ok := gens[id]; ok {
					if _, err := f.reg.Outcomes(ctx, &apiv1.OutcomesRequest{GatewayID: "gw", Outcomes: []apiv1.Outcome{{InstanceID: id, Generation: g,
						OK: rapid.IntRange(0, 30).Draw(rt, "ok"), Errors: rapid.IntRange(0, 30).Draw(rt, "errors")}}}); err != nil {
						rt.Fatal(err)
					}
				}
			},
			"time": func(rt *rapid.T) {
				f.clock.Advance(time.Duration(rapid.IntRange(1, 40).Draw(rt, "seconds")) * time.Second)
				if _, err := f.reg.Sweep(ctx); err != nil {
					rt.Fatal(err)
				}
				for id := range gens {
					if _, err := f.reg.Instance(id); err != nil {
						delete(gens, id)
					}
				}
			},
			"": func(rt *rapid.T) {
				now := f.reg.State().Revision
				for _, p := range polls {
					got := answerOf(f, p.q)
					if !f.reg.TopicChanged(p.topic, p.index) {
						if got != p.answer {
							rt.Fatalf("%+v: parked at %d while its answer changed (now %d):\nheld:\n%s\nnow:\n%s", *p.q, p.index, now, p.answer, got)
						}
						continue
					}
					p.index, p.answer = now, got // answered: it holds the answer now
				}
			},
		})
	})
}

// TestChangesOfTheFleet: the change log tells the instances changed since a revision, each
// once, and says it cannot once the revision is older than what it keeps or a change of every
// instance (a restore) came since.
func TestChangesOfTheFleet(t *testing.T) {
	registry.LimitChangeLog(t, 8)
	f := newJudgedFixture(t)
	mustRegister(t, f, request("a-1", "svc-a"))
	base := f.reg.State().Revision
	mustRegister(t, f, request("b-1", "svc-b"))
	heartbeat(t, f, "b-1", 2, "failing")
	ids, ok := f.reg.ChangesOf(base, registry.Topic{})
	if !ok || fmt.Sprint(ids) != "[b-1]" {
		t.Errorf("ChangesOf(%d) = %v, %v; want [b-1]", base, ids, ok)
	}
	if ids, ok := f.reg.ChangesOf(f.reg.State().Revision, registry.Topic{}); !ok || len(ids) != 0 {
		t.Errorf("ChangesOf(now) = %v, %v; want none", ids, ok)
	}
	for i := range 8 { // more changes than the log keeps
		mustRegister(t, f, request(fmt.Sprintf("c-%d", i), "svc-c"))
	}
	if ids, ok := f.reg.ChangesOf(base, registry.Topic{}); ok {
		t.Errorf("ChangesOf(%d) = %v after the log moved past it; want it cannot tell", base, ids)
	}
	recent := f.reg.State().Revision
	mustRegister(t, f, request("d-1", "svc-d"))
	if ids, ok := f.reg.ChangesOf(recent, registry.Topic{}); !ok || fmt.Sprint(ids) != "[d-1]" {
		t.Errorf("ChangesOf(%d) = %v, %v; want [d-1]", recent, ids, ok)
	}

	// a panic flag changes every entry of its group: the log cannot name them
	g := newJudgedFixture(t)
	gens := []int64{mustRegister(t, g, request("p-1", "svc-p")).Generation, mustRegister(t, g, request("p-2", "svc-p")).Generation}
	before := g.reg.State().Revision
	heartbeat(t, g, "p-1", gens[0], "failing")
	heartbeat(t, g, "p-2", gens[1], "failing")
	if got := answer(g)["p-1"]; !strings.HasSuffix(got, "panic=true") {
		t.Fatalf("p-1 is answered %s, want its group in panic", got)
	}
	if ids, ok := g.reg.ChangesOf(before, registry.Topic{}); ok {
		t.Errorf("ChangesOf(%d) = %v across a panic; want it cannot tell", before, ids)
	}
}

// TestChangesOfATopic: a delta watch of one service or capability is told the instances
// whose change touched it — an instance that moved to another capability included, since
// the watcher holds it — and not the rest of the fleet's changes.
func TestChangesOfATopic(t *testing.T) {
	f := newJudgedFixture(t)
	mail := capability("mail.send", "smtp", "1.0.0", "")
	mustRegister(t, f, request("a-1", "svc-a"))
	mustRegister(t, f, request("m-1", "svc-m", mail))
	base := f.reg.State().Revision
	mustRegister(t, f, request("b-1", "svc-b"))
	mustRegister(t, f, request("m-2", "svc-m", mail))
	mustRegister(t, f, request("m-1", "svc-m")) // m-1 leaves mail.send for messaging.publish
	for _, tc := range []struct {
		topic registry.Topic
		want  string
	}{
		{registry.CapabilityTopic("mail.send"), "[m-1 m-2]"},
		{registry.CapabilityTopic("messaging.publish"), "[m-1 b-1]"},
		{registry.ServiceTopic("svc-b"), "[b-1]"},
		{registry.ServiceTopic("svc-a"), "[]"},
		{registry.Topic{}, "[m-1 m-2 b-1]"},
	} {
		ids, ok := f.reg.ChangesOf(base, tc.topic)
		if !ok || fmt.Sprint(ids) != tc.want {
			t.Errorf("ChangesOf(%d, %v) = %v, %v; want %s", base, tc.topic, ids, ok, tc.want)
		}
	}
}
