package etcdstore_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/prober"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// startReplica runs a registry replica named name over the etcd prefix, with the
// eligibility engine (slow start 1 s unless an option sets another engine, see
// withSlowStart) and a prober that probes only while it is elected, until the test ends or
// stop is called (it then resigns). opts adjust its configuration.
func startReplica(t *testing.T, cli *clientv3.Client, prefix, name string, opts ...func(*registry.Config)) (reg *registry.Registry, stop func()) {
	t.Helper()
	s, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute, ReplicaID: name})
	if err != nil {
		t.Fatal(err)
	}
	cfg := registry.Config{LeaseTTL: time.Minute, SweepInterval: 50 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Eligibility == nil {
		withSlowStart(t, time.Second)(&cfg)
	}
	reg, err = registry.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prober.New(prober.Config{Targets: reg.ProbeTargets, Report: reg.ReportProbe, Leader: reg.Leader, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { reg.Run(ctx); done <- struct{}{} }()
	go func() { p.Run(ctx); done <- struct{}{} }()
	stop = sync.OnceFunc(func() { cancel(); <-done; <-done })
	t.Cleanup(stop)
	return reg, stop
}

// TestVerdictsAreShared: two registry replicas over one etcd cluster, each with the
// eligibility engine and a prober that probes only while its replica is elected. The
// provider's health endpoint fails, then recovers: the replica that does not probe answers
// the elected one's verdicts.
func TestVerdictsAreShared(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/judged%d/", prefixes.Add(1))
	var failing atomic.Bool
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer provider.Close()

	start := func(name string) *registry.Registry {
		reg, _ := startReplica(t, cli, prefix, name)
		return reg
	}
	a, b := start("a"), start("b")
	registrytest.Until(t, "one replica is elected", func() bool { return a.Leader() != b.Leader() })
	leader, follower := a, b
	if b.Leader() {
		leader, follower = b, a
	}
	req := &apiv1.RegisterRequest{InstanceID: "jms-1", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: provider.URL, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: "jms-1", Version: "1.0.0"},
			Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "100ms", UnhealthyAfter: apiv1.Int(2)}}}
	if _, err := follower.Register(context.Background(), req); err != nil { // through the replica that does not probe
		t.Fatal(err)
	}
	state := func(r *registry.Registry) string {
		ex, err := r.Explain("jms-1")
		if err != nil {
			return err.Error()
		}
		return ex.State
	}
	registrytest.Until(t, "both replicas admit it (only the elected one probes)", func() bool {
		return state(leader) == apiv1.EligibilityServing && state(follower) == apiv1.EligibilityServing
	})
	failing.Store(true)
	registrytest.Until(t, "both replicas withdraw it", func() bool {
		return state(leader) == apiv1.EligibilityWithdrawn && state(follower) == apiv1.EligibilityWithdrawn
	})
	ex, _ := follower.Explain("jms-1")
	if len(ex.Reasons) != 1 || ex.Reasons[0].Code != health.ReasonProbeFailing || !strings.Contains(ex.Reasons[0].Evidence.Detail, "elected replica") {
		t.Errorf("the follower's reasons: %+v, want PROBE_FAILING judged by the elected replica", ex.Reasons)
	}
	failing.Store(false)
	registrytest.Until(t, "both replicas take it back through slow start", func() bool {
		return state(leader) == apiv1.EligibilityServing && state(follower) == apiv1.EligibilityServing
	})

	// Passive evidence reported to the replica that does not judge reaches the one that does.
	second := *req
	second.InstanceID, second.Manifest = "jms-2", nil // a second member of the group, so that one may be ejected
	if _, err := leader.Register(context.Background(), &second); err != nil {
		t.Fatal(err)
	}
	in, _ := follower.Instance("jms-1")
	registrytest.Until(t, "the follower holds jms-2", func() bool { _, err := follower.Instance("jms-2"); return err == nil })
	resp, err := follower.Outcomes(context.Background(), &apiv1.OutcomesRequest{GatewayID: "gw-1",
		Outcomes: []apiv1.Outcome{{InstanceID: "jms-1", Generation: in.Generation, OK: 2, Errors: 38}}})
	if err != nil || resp.Accepted != 1 {
		t.Fatalf("outcomes through the follower: %+v %v", resp, err)
	}
	registrytest.Until(t, "the elected replica ejects it and the follower follows", func() bool {
		ex, _ := follower.Explain("jms-1")
		return ex.State == apiv1.EligibilityWithdrawn && len(ex.Reasons) > 0 && ex.Reasons[0].Code == health.ReasonOutlierErrorRate
	})
}

// TestABatchOfVerdictsShowsAtOnce: verdicts published in one transaction share a revision;
// the revision readers see must not move to it until every one of them is followed (it used
// to move with the first: an answer cached at that revision then lacked the others until the
// next change, which on a quiet fleet can be minutes away).
func TestABatchOfVerdictsShowsAtOnce(t *testing.T) {
	cli := startEtcd(t)
	s := newStore(t, cli, time.Minute)
	ctx := context.Background()
	var vs []registry.SharedVerdict
	for _, id := range []string{"v-1", "v-2", "v-3"} {
		rec := record(id)
		if err := s.Register(ctx, rec); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, registry.SharedVerdict{InstanceID: id, Generation: rec.Generation, State: apiv1.EligibilityServing, Weight: 100, Since: time.Now()})
	}
	registrytest.Until(t, "the registrations' watch events are applied", func() bool {
		_, ok := s.SharedVerdict("v-3")
		rev, _ := s.Watch()
		return !ok && rev >= vs[2].Generation
	})
	before, _ := s.Watch()
	var mu sync.Mutex
	var seen []int64 // the revision readers saw as each verdict was followed
	s.OnVerdict(func(registry.SharedVerdict) {
		rev, _ := s.Watch()
		mu.Lock()
		seen = append(seen, rev)
		mu.Unlock()
	})
	if err := s.PublishVerdicts(ctx, vs); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "all three are followed and shown", func() bool {
		mu.Lock()
		defer mu.Unlock()
		rev, _ := s.Watch()
		return len(seen) == 3 && rev > before
	})
	mu.Lock()
	defer mu.Unlock()
	for i, rev := range seen {
		if rev != before {
			t.Errorf("verdict %d followed with the revision at %d, want %d (the batch's revision shown before all of it)", i+1, rev, before)
		}
	}
}

// TestOwnVerdictsComeBackAsWritten: the replica that publishes verdicts takes them back from
// its watch as it wrote them, the other decodes them; both hold the same, the last of
// several writes of one key included, and the writer holds none once the watch has caught up.
func TestOwnVerdictsComeBackAsWritten(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/held%d/", prefixes.Add(1))
	ctx := context.Background()
	writer := runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute, ReplicaID: "w"})
	reader := runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute, ReplicaID: "r"})
	for _, id := range []string{"i-1", "i-2"} {
		if err := writer.Register(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now() // with a monotonic clock reading, which a decoded copy lacks
	var last []registry.SharedVerdict
	for step, weight := range []int{10, 20, 30} {
		last = []registry.SharedVerdict{
			{InstanceID: "i-1", Generation: 1, State: apiv1.EligibilitySlowStart, Weight: weight, Since: since, Reasons: []string{}},
			{InstanceID: "i-2", Generation: 1, State: apiv1.EligibilityServing, Weight: 100, Since: since.Add(time.Duration(step))},
		}
		if err := writer.PublishVerdicts(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	registrytest.Until(t, "both replicas hold the last verdicts and the writer holds none back", func() bool {
		for _, want := range last {
			for _, s := range []*etcdstore.Store{writer, reader} {
				if got, ok := s.SharedVerdict(want.InstanceID); !ok || got.Weight != want.Weight || !got.Since.Equal(want.Since) {
					return false
				}
			}
		}
		return etcdstore.HeldVerdicts(writer) == 0
	})
	for _, want := range last {
		w, _ := writer.SharedVerdict(want.InstanceID)
		r, _ := reader.SharedVerdict(want.InstanceID)
		if diff := cmp.Diff(r, w); diff != "" {
			t.Errorf("%s: the writer's copy and the reader's differ (-reader +writer):\n%s", want.InstanceID, diff)
		}
	}
}

// withSlowStart is a startReplica option: the replica's eligibility engine ramps over d.
func withSlowStart(t *testing.T, d time.Duration) func(*registry.Config) {
	return func(cfg *registry.Config) {
		// RampStep as the registry binary sets it: its sweep interval (startReplica's)
		m, err := health.NewMonitor(health.MonitorConfig{RampStep: 50 * time.Millisecond, Engine: health.Config{ExternalLeases: true, SlowStart: d}})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Eligibility = m
	}
}

// consume runs a consumer of reg's messaging.publish answers until stop is called: it asks,
// hands the answer to see, and long-polls for the next revision, as a client of the HTTP
// API does.
func consume(reg *registry.Registry, see func(registry.Answer)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ans := reg.Query(&registry.Query{CapabilityID: "messaging.publish"})
			see(ans)
			reg.Wait(ctx, ans.Epoch, ans.Revision, time.Minute)
		}
	}()
	return func() { cancel(); <-done }
}

// TestLongPollsSeeEveryIncarnation: a consumer long-polls the elected replica (each answer
// made at a revision, the next poll waiting for the revision to pass it) while an instance
// without a probe class is re-registered again and again. Each new incarnation must reach
// the consumer within a few sweeps, not when the poll times out: with a store shared by
// replicas the revision is etcd's, and what the answers hold may change only with it. (A
// build that wrote no verdict for such an instance, and did not derive its first verdict
// from the record, left an answer made between the record's write and the monitor's verdict
// without the new incarnation until the next write.)
func TestLongPollsSeeEveryIncarnation(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/poll%d/", prefixes.Add(1))
	reg, _ := startReplica(t, cli, prefix, "a")
	registrytest.Until(t, "the replica is elected", reg.Leader)
	req := &apiv1.RegisterRequest{InstanceID: "x", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://x", Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}

	var seen atomic.Int64 // the generation of x in the consumer's latest answer
	stop := consume(reg, func(ans registry.Answer) {
		gen := int64(0)
		for _, e := range ans.Entries {
			if e.Record.InstanceID == "x" {
				gen = e.Record.Generation
			}
		}
		seen.Store(gen)
	})
	defer stop()

	for i := range 20 {
		resp, err := reg.Register(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for seen.Load() != resp.Generation {
			if time.Now().After(deadline) {
				t.Fatalf("re-registration %d: the consumer's answer holds generation %d of x 5 s later, want %d", i, seen.Load(), resp.Generation)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestLongPollsSeeTheRamp: a consumer long-polls the replica that does not judge while an
// instance without a probe class goes through a slow start of 3 s. The ramp reaches it
// through the revision (the elected replica's ramp clock moves it), and two answers at one
// revision hold the same weight, to the end of the ramp: an answer cached under a revision
// stays true. (A build that ramped on each replica's own clock moved no revision during the
// ramp; an earlier one ended the ramp on the follower's clock, up to a sweep before the
// elected replica's serving verdict moved the revision.)
func TestLongPollsSeeTheRamp(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/ramp%d/", prefixes.Add(1))
	slowStart := withSlowStart(t, 3*time.Second)
	a, _ := startReplica(t, cli, prefix, "a", slowStart)
	b, _ := startReplica(t, cli, prefix, "b", slowStart)
	registrytest.Until(t, "one replica is elected", func() bool { return a.Leader() != b.Leader() })
	leader, follower := a, b
	if b.Leader() {
		leader, follower = b, a
	}

	weights := map[int64]int{} // revision -> the weight of x answered at it
	var seen []int             // the distinct weights, in order
	stop := consume(follower, func(ans registry.Answer) {
		for _, e := range ans.Entries {
			if e.Record.InstanceID != "x" {
				continue
			}
			if w, ok := weights[ans.Revision]; ok && w != e.Weight {
				t.Errorf("revision %d answered weight %d, then %d", ans.Revision, w, e.Weight)
			}
			weights[ans.Revision] = e.Weight
			if len(seen) == 0 || seen[len(seen)-1] != e.Weight {
				seen = append(seen, e.Weight)
			}
		}
	})

	req := &apiv1.RegisterRequest{InstanceID: "x", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://x", Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	if _, err := leader.Register(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "x serving on the follower", func() bool {
		ex, err := follower.Explain("x")
		return err == nil && ex.State == apiv1.EligibilityServing
	})
	time.Sleep(200 * time.Millisecond) // the consumer's last answer
	stop()
	t.Logf("the consumer saw the weights %v", seen)
	if len(seen) < 6 || seen[len(seen)-1] != 100 {
		t.Errorf("the consumer saw the weights %v: want the ramp, at least 6 steps ending at 100", seen)
	}
}

// TestRampClockIsShared: the ramp clock one replica publishes reaches another's hook from its
// watch, before that replica's revision moves to the write's, and a replica started later
// reads it with its view.
func TestRampClockIsShared(t *testing.T) {
	cli := startEtcd(t)
	open, _ := replicas(t, cli, "rampclock")
	a, b := open(), open()
	ctx := context.Background()
	var toldM sync.Mutex
	var told []registry.Changes // what each move of b's revision told
	b.OnPublish(func(rev int64, c registry.Changes) {
		toldM.Lock()
		defer toldM.Unlock()
		told = append(told, registry.Changes{Services: slices.Clone(c.Services), Capabilities: slices.Clone(c.Capabilities), Instances: slices.Clone(c.Instances), All: c.All})
	})
	for _, rec := range []*registry.Record{record("moved"), record("still")} {
		if rec.InstanceID == "still" {
			rec.ServiceName = "other" // a service whose ramps the clock did not move
		}
		if err := a.Register(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	registrytest.Until(t, "b holds both registrations", func() bool { return len(b.Records()) == 2 })
	toldM.Lock()
	before := len(told) // b's start and the registrations
	toldM.Unlock()
	type seen struct {
		at       time.Time
		revision int64 // b's revision when its hook ran
	}
	got := make(chan seen, 4)
	b.OnRampClock(func(at time.Time) []string {
		rev, _ := b.Watch()
		got <- seen{at, rev}
		return []string{"moved", "gone-by-now"}
	})
	if !b.RampClock().IsZero() {
		t.Fatalf("a ramp clock before any was published: %s", b.RampClock())
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	rev0, _ := b.Watch()
	if err := a.PublishRampClock(ctx, at); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if !s.at.Equal(at) || s.revision != rev0 {
			t.Errorf("b's hook got %s at its revision %d, want %s before its revision moved from %d", s.at, s.revision, at, rev0)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's hook never got the ramp clock")
	}
	registrytest.Until(t, "b's revision moves to the write's", func() bool { rev, _ := b.Watch(); return rev > rev0 })
	// The clock's revision tells what the hook said it moved, and nothing else: the long
	// polls and delta watches of other services do not hear of it.
	want := registry.Changes{Services: []string{"svc"}, Capabilities: []string{"a.b"}, Instances: []string{"moved"}}
	var clock *registry.Changes
	registrytest.Until(t, "b tells the ramp clock's revision", func() bool {
		toldM.Lock()
		defer toldM.Unlock()
		for i := before; i < len(told) && clock == nil; i++ {
			if told[i].All || len(told[i].Instances) > 0 { // not a move that tells nothing
				clock = &told[i]
			}
		}
		return clock != nil
	})
	if diff := cmp.Diff(want, *clock, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the ramp clock's revision told (-want +got):\n%s", diff)
	}
	if c := open(); !c.RampClock().Equal(at) {
		t.Errorf("a replica started later holds the ramp clock %s, want %s", c.RampClock(), at)
	}
}

// TestRampAcrossAFailover: three replicas; an instance without a probe class is in the middle
// of a 3 s slow start when the elected replica goes. The replica elected next takes over the
// published slow start and publishes its own ramp clock, so the replica still following
// carries on up the ramp from where it was — never back to 10 — to serving.
func TestRampAcrossAFailover(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/rampfail%d/", prefixes.Add(1))
	const ramp = 3 * time.Second
	slowStart := withSlowStart(t, ramp)
	type replica struct {
		reg  *registry.Registry
		stop func()
	}
	var rs []replica
	for _, name := range []string{"a", "b", "c"} {
		reg, stop := startReplica(t, cli, prefix, name, slowStart)
		rs = append(rs, replica{reg, stop})
	}
	leader := func() int {
		for i, r := range rs {
			if r.stop != nil && r.reg.Leader() {
				return i
			}
		}
		return -1
	}
	registrytest.Until(t, "one replica is elected", func() bool { return leader() >= 0 })
	l := leader()
	req := &apiv1.RegisterRequest{InstanceID: "x", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://x", Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	registered := time.Now() // the ramp begins no earlier
	if _, err := rs[l].reg.Register(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	weight := func(reg *registry.Registry) int {
		for _, e := range reg.Query(&registry.Query{CapabilityID: "messaging.publish"}).Entries {
			if e.Record.InstanceID == "x" {
				return e.Weight
			}
		}
		return 0
	}
	followers := []int{(l + 1) % 3, (l + 2) % 3}
	registrytest.Until(t, "the followers are on the ramp", func() bool {
		return weight(rs[followers[0]].reg) >= 30 && weight(rs[followers[1]].reg) >= 30
	})
	rs[l].stop()
	rs[l].stop = nil
	registrytest.Until(t, "another replica is elected", func() bool { return leader() >= 0 })
	still := followers[0]
	if leader() == still {
		still = followers[1]
	}
	// Sampled until serving: the weights it answers never go down, and serving comes no
	// sooner than the ramp's end (how often the loop samples decides nothing: a slow machine
	// sees fewer steps, never a wrong one).
	var seen []int
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		w := weight(rs[still].reg)
		if len(seen) == 0 || seen[len(seen)-1] != w {
			seen = append(seen, w)
		}
		if w == 100 {
			if early := ramp - time.Since(registered); early > 0 {
				t.Errorf("serving %s before the slow start could end", early)
			}
			break
		}
	}
	t.Logf("the replica still following answered %v after the failover", seen)
	if seen[len(seen)-1] != 100 {
		t.Errorf("the replica still following answered %v: want the ramp carried on to serving", seen)
	}
	if !slices.IsSorted(seen) || seen[0] < 30 {
		t.Errorf("the replica still following answered %v: the ramp went back below where it was", seen)
	}
}

// TestFirstVerdictsAreNotWritten: an incarnation's first verdict (here a slow start of 2 s)
// is derived from its registration by every replica, and the serving it ends in from the
// ramp clock, so the elected replica writes no verdict while neither differs: none during
// the ramp, none when it ends. A replica whose monitor has not heard of the instance yet (it
// never sweeps here) answers at each revision what a replica that holds it answers.
func TestFirstVerdictsAreNotWritten(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/first%d/", prefixes.Add(1))
	slowStart := withSlowStart(t, 2*time.Second)
	leader, _ := startReplica(t, cli, prefix, "a", slowStart)
	registrytest.Until(t, "the first replica is elected", leader.Leader)
	follower, _ := startReplica(t, cli, prefix, "b", slowStart)
	unswept, _ := startReplica(t, cli, prefix, "c", slowStart, func(cfg *registry.Config) { cfg.SweepInterval = time.Hour })

	var mu sync.Mutex
	weights := map[string]map[int64]int{} // replica -> revision -> the weight of x answered at it
	watch := func(name string, reg *registry.Registry) func() {
		weights[name] = map[int64]int{}
		return consume(reg, func(ans registry.Answer) {
			for _, e := range ans.Entries {
				if e.Record.InstanceID == "x" {
					mu.Lock()
					weights[name][ans.Revision] = e.Weight
					mu.Unlock()
				}
			}
		})
	}
	stopF, stopU := watch("follower", follower), watch("unswept", unswept)
	verdicts := func() int64 {
		resp, err := cli.Get(context.Background(), prefix+"verdicts/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}

	req := &apiv1.RegisterRequest{InstanceID: "x", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://x", Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	if _, err := follower.Register(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "both followers answer x half-way up the ramp", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Max(append(slices.Collect(maps.Values(weights["follower"])), 0)) >= 50 &&
			slices.Max(append(slices.Collect(maps.Values(weights["unswept"])), 0)) >= 50
	})
	if n := verdicts(); n != 0 {
		t.Errorf("%d verdicts in etcd half-way up the ramp, want none", n)
	}
	stopF()
	stopU()
	mu.Lock()
	for rev, w := range weights["unswept"] {
		if fw, ok := weights["follower"][rev]; ok && fw != w {
			t.Errorf("at revision %d the replica that never swept answered weight %d, the one that syncs %d", rev, w, fw)
		}
	}
	mu.Unlock()
	registrytest.Until(t, "x serving on both followers", func() bool {
		ex, err := follower.Explain("x")
		if err != nil || ex.State != apiv1.EligibilityServing {
			return false
		}
		for _, e := range unswept.Query(&registry.Query{CapabilityID: "messaging.publish"}).Entries {
			if e.Record.InstanceID == "x" {
				return e.Eligibility == apiv1.EligibilityServing && e.Weight == 100
			}
		}
		return false
	})
	if n := verdicts(); n != 0 {
		t.Errorf("%d verdicts in etcd after the ramp, want none", n)
	}
}
