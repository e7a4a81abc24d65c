package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
)

func newJudgedFixture(t *testing.T) *fixture {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return newFixture(t, registry.Config{Eligibility: m})
}

func heartbeat(t *testing.T, f *fixture, id string, gen int64, h string) {
	t.Helper()
	if _, err := f.reg.Heartbeat(context.Background(), id, &apiv1.HeartbeatRequest{Generation: gen, Health: h}); err != nil {
		t.Fatalf("heartbeat %s: %v", id, err)
	}
}

// answer is what discovery says of one capability: instance -> eligibility/weight/panic.
func answer(f *fixture) map[string]string {
	q, _ := registry.ParseQuery(map[string][]string{"capability_id": {"messaging.publish"}})
	out := map[string]string{}
	for _, e := range f.reg.Query(q).Entries {
		w := e.Wire()
		out[w.InstanceID] = fmt.Sprintf("%s/%d/panic=%v", w.Eligibility, w.Weight, w.Panic)
	}
	return out
}

func TestDiscoveryFollowsEligibility(t *testing.T) {
	f := newJudgedFixture(t)
	gens := map[string]int64{}
	for _, id := range []string{"a", "b", "c", "d"} {
		gens[id] = mustRegister(t, f, request(id, "egress-jms")).Generation
	}
	f.clock.Advance(15 * time.Second)
	f.reg.Sweep(context.Background())
	want := map[string]string{"a": "slow_start/55/panic=false", "b": "slow_start/55/panic=false", "c": "slow_start/55/panic=false", "d": "slow_start/55/panic=false"}
	if diff := cmp.Diff(want, answer(f)); diff != "" {
		t.Fatalf("slow start half way (-want +got):\n%s", diff)
	}
	st0 := f.reg.State()
	heartbeat(t, f, "a", gens["a"], "failing")
	heartbeat(t, f, "b", gens["b"], "degraded")
	if st := f.reg.State(); st.Revision <= st0.Revision {
		t.Fatalf("a withdrawal did not advance the revision (%d -> %d): watchers would not wake", st0.Revision, st.Revision)
	}
	want = map[string]string{"b": "degraded/50/panic=false", "c": "slow_start/55/panic=false", "d": "slow_start/55/panic=false"}
	if diff := cmp.Diff(want, answer(f)); diff != "" {
		t.Fatalf("one failing, one degraded (-want +got):\n%s", diff)
	}
	// include=all: the instances out of rotation too, with their verdicts (a consumer judging
	// panic on its own pool needs them)
	all, _ := registry.ParseQuery(map[string][]string{"capability_id": {"messaging.publish"}, "include": {"all"}})
	got := map[string]string{}
	for _, e := range f.reg.Query(all).Entries {
		got[e.Record.InstanceID] = e.Eligibility
	}
	if diff := cmp.Diff(map[string]string{"a": "withdrawn", "b": "degraded", "c": "slow_start", "d": "slow_start"}, got); diff != "" {
		t.Fatalf("include=all (-want +got):\n%s", diff)
	}
	in, _ := f.reg.Instance("a")
	if in.Eligibility != apiv1.EligibilityWithdrawn || in.Weight != 0 {
		t.Errorf("the catalog says a is %s/%d, want withdrawn/0", in.Eligibility, in.Weight)
	}
	heartbeat(t, f, "c", gens["c"], "failing")
	heartbeat(t, f, "d", gens["d"], "failing")
	want = map[string]string{"a": "withdrawn/100/panic=true", "b": "degraded/100/panic=true", "c": "withdrawn/100/panic=true", "d": "withdrawn/100/panic=true"}
	if diff := cmp.Diff(want, answer(f)); diff != "" {
		t.Fatalf("1 of 4 in rotation: want panic with all at 100 (-want +got):\n%s", diff)
	}
	ex, err := f.reg.Explain("a")
	if err != nil || ex.State != apiv1.EligibilityWithdrawn || ex.Reasons[0].Code != health.ReasonSelfReportedFailing {
		t.Fatalf("Explain(a) = %+v, %v", ex, err)
	}
	if _, err := f.reg.Explain("nope"); !errors.Is(err, registry.ErrInstanceNotFound) {
		t.Errorf("Explain of an unknown instance: %v, want ErrInstanceNotFound", err)
	}
	// a deregistered instance leaves the answer at once
	if err := f.reg.Deregister(context.Background(), "b", gens["b"]); err != nil {
		t.Fatal(err)
	}
	if _, ok := answer(f)["b"]; ok {
		t.Error("a deregistered instance is still answered")
	}
}

func TestOutcomesEjectAndAreFenced(t *testing.T) {
	f := newJudgedFixture(t)
	gens := map[string]int64{}
	for _, id := range []string{"a", "b", "c"} {
		gens[id] = mustRegister(t, f, request(id, "egress-jms")).Generation
	}
	resp, err := f.reg.Outcomes(context.Background(), &apiv1.OutcomesRequest{GatewayID: "gw", Outcomes: []apiv1.Outcome{
		{InstanceID: "a", Generation: gens["a"], OK: 5, Errors: 30},
		{InstanceID: "b", Generation: gens["b"] + 7, ConnectFailures: 50}, // an incarnation that is gone
		{InstanceID: "zz", Generation: 1, ConnectFailures: 50},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Accepted != 1 || resp.Ignored != 2 {
		t.Errorf("accepted %d ignored %d, want 1 and 2", resp.Accepted, resp.Ignored)
	}
	ex, _ := f.reg.Explain("a")
	if ex.State != apiv1.EligibilityWithdrawn || ex.Reasons[0].Code != health.ReasonOutlierErrorRate {
		t.Errorf("a after a window of 30 errors in 35: %+v", ex)
	}
	if ex, _ := f.reg.Explain("b"); ex.State == apiv1.EligibilityWithdrawn {
		t.Error("an outcome for another generation ejected b")
	}
	if _, err := f.reg.Outcomes(context.Background(), &apiv1.OutcomesRequest{Outcomes: []apiv1.Outcome{{InstanceID: "a", Generation: 0, OK: -1}}}); err == nil {
		t.Error("a malformed outcome report was accepted")
	}
}

func TestSelfPreservationStopsEviction(t *testing.T) {
	f := newJudgedFixture(t)
	ctx := context.Background()
	gens := map[string]int64{}
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("p%02d", i)
		ids = append(ids, id)
		gens[id] = mustRegister(t, f, request(id, "egress-jms")).Generation
	}
	// Two windows of a healthy fleet, then only 4 of 20 keep renewing (a partition).
	for step := range 12 {
		f.clock.Advance(15 * time.Second)
		for i, id := range ids {
			if step < 6 || i < 4 {
				if step%2 == 1 {
					heartbeat(t, f, id, gens[id], "ok")
				}
			}
		}
		if _, err := f.reg.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if h := f.reg.Health(f.clock.Now()); !h.SelfPreservation || h.ActiveInstances != 20 {
		t.Fatalf("after 90 s of 4/20 renewing: self_preservation %v, %d instances; want true and 20 (none evicted)", h.SelfPreservation, h.ActiveInstances)
	}
	// The partition heals: renewals come back and the mode ends; leases expire normally again.
	for step := range 8 {
		f.clock.Advance(15 * time.Second)
		for _, id := range ids {
			if step%2 == 1 {
				if _, err := f.reg.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: gens[id]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		f.reg.Sweep(ctx)
	}
	if h := f.reg.Health(f.clock.Now()); h.SelfPreservation {
		t.Fatal("renewals recovered but self-preservation holds")
	}
	if got := answer(f); len(got) != 20 {
		t.Errorf("%d instances answered after recovery, want 20", len(got))
	}
	if ex, _ := f.reg.Explain(ids[0]); ex.State != apiv1.EligibilityServing {
		t.Errorf("%s after recovery: %s, want serving", ids[0], ex.State)
	}
}

// TestRestoredRevisionNeverGoesBack: a snapshot carries the revision discovery answered (the
// store's plus the verdicts'), and the restored registry continues above it (in a new epoch);
// the restored fleet is judged from the next sweep.
func TestRestoredRevisionNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	m, _ := health.NewMonitor(health.MonitorConfig{})
	f := newFixture(t, registry.Config{Eligibility: m, SnapshotDir: t.TempDir()})
	f.clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: snapshots are written
	gens := map[string]int64{}
	for _, id := range []string{"a", "b", "c"} {
		gens[id] = mustRegister(t, f, request(id, "egress-jms")).Generation
	}
	for range 3 { // verdict changes advance the revision without the store's
		heartbeat(t, f, "a", gens["a"], "failing")
		heartbeat(t, f, "a", gens["a"], "ok")
	}
	seen := f.reg.State().Revision
	wrote, err := f.reg.WriteSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := health.NewMonitor(health.MonitorConfig{})
	g := newFixture(t, registry.Config{Eligibility: m2})
	if _, err := g.reg.RestoreSnapshot(ctx, wrote.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := g.reg.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if rev := g.reg.State().Revision; rev < seen {
		t.Errorf("restored registry answers revision %d, below the %d consumers saw", rev, seen)
	}
	if ex, err := g.reg.Explain("a"); err != nil || ex.State != apiv1.EligibilitySlowStart {
		t.Errorf("a restored instance after a sweep: %+v %v, want slow_start", ex, err)
	}
}

// TestProbeTargetsFollowTheFleet: the probe targets are built once per store revision (the
// prober asks ten times a second) and follow registrations, re-registrations,
// deregistrations and expiry.
func TestProbeTargetsFollowTheFleet(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{LeaseTTL: time.Minute})
	probed := func(id, path string) *apiv1.RegisterRequest {
		req := request(id, "svc")
		req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "svc", Instance: id, Version: "0.1.3"},
			Health: &apiv1.ManifestHealth{Path: path, Interval: "5s", UnhealthyAfter: apiv1.Int(2)}}
		return req
	}
	urls := func() []string {
		var out []string
		for _, tg := range f.reg.ProbeTargets() {
			out = append(out, tg.ID+" "+tg.URL)
		}
		slices.Sort(out)
		return out
	}
	check := func(step string, want ...string) {
		t.Helper()
		if diff := cmp.Diff(want, urls(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: targets (-want +got):\n%s", step, diff)
		}
	}
	check("empty")
	mustRegister(t, f, probed("a", "/healthz"))
	mustRegister(t, f, request("plain", "svc"))
	check("registered", "a http://a:8080/healthz")
	if first, again := f.reg.ProbeTargets(), f.reg.ProbeTargets(); &first[0] != &again[0] {
		t.Errorf("the targets were built again at the same revision")
	}
	b := mustRegister(t, f, probed("b", "/ready"))
	check("another", "a http://a:8080/healthz", "b http://b:8080/ready")
	mustRegister(t, f, probed("a", "/live"))
	check("re-registered", "a http://a:8080/live", "b http://b:8080/ready")
	if err := f.reg.Deregister(ctx, "b", b.Generation); err != nil {
		t.Fatal(err)
	}
	check("deregistered", "a http://a:8080/live")
	f.clock.Advance(2 * time.Minute)
	if _, err := f.reg.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	check("expired")
}

// TestJournalCarriesTheFirstVerdict: a registration's event says the new incarnation's first
// verdict, and the journal records no transition out of absent beside it; later transitions
// are recorded as before.
func TestJournalCarriesTheFirstVerdict(t *testing.T) {
	j := journal.New(0, nil)
	m, err := health.NewMonitor(health.MonitorConfig{OnTransition: journal.FromTransitions(j),
		Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, SlowStart: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, registry.Config{Eligibility: m, Journal: j})
	probed := request("p", "egress-jms")
	probed.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: "p", Version: "0.1.3"},
		Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "1s", UnhealthyAfter: apiv1.Int(2)}}
	mustRegister(t, f, request("a", "egress-jms"))
	mustRegister(t, f, probed)
	mustRegister(t, f, request("a", "egress-jms")) // a new incarnation
	f.clock.Advance(11 * time.Second)
	f.reg.Sweep(context.Background())
	es, _ := j.Find(journal.Query{Types: []string{apiv1.EventRegistered, apiv1.EventReregistered, apiv1.EventEligibility}})
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%s %s %v", e.Type, e.Subject, e.Attrs["eligibility"]))
	}
	want := []string{"instance.registered a slow_start", "instance.registered p unknown", "instance.reregistered a slow_start",
		"eligibility.transition a <nil>"} // slow_start -> serving
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestRuntimeReadinessIsOneMoreEvidence: an instance registered not_ready (a Kubernetes
// endpoint not ready, through kube-sync, or an SDK publishing when ready) is never in
// rotation, and never admitted (ADMITTING, RUNTIME_NOT_READY) until it says ok; ready, it enters slow start; a heartbeat not_ready withdraws it
// again, failing replaces the cause with SELF_REPORTED_FAILING without counting a second
// withdrawal.
func TestRuntimeReadinessIsOneMoreEvidence(t *testing.T) {
	f := newJudgedFixture(t)
	gens := map[string]int64{}
	for _, id := range []string{"a", "b"} {
		gens[id] = mustRegister(t, f, request(id, "egress-jms")).Generation
	}
	req := request("pod", "egress-jms")
	req.Health = apiv1.HealthNotReady
	gens["pod"] = mustRegister(t, f, req).Generation
	if _, ok := answer(f)["pod"]; ok {
		t.Fatal("an instance registered not_ready is in rotation")
	}
	reason := func(id string) string {
		ex, err := f.reg.Explain(id)
		if err != nil || len(ex.Reasons) == 0 {
			t.Fatalf("Explain(%s) = %+v, %v", id, ex, err)
		}
		return ex.State + " " + ex.Reasons[0].Code
	}
	if got := reason("pod"); got != "withdrawn ADMITTING" {
		t.Errorf("registered not_ready: %s, want never admitted until ready", got)
	}
	heartbeat(t, f, "pod", gens["pod"], "ok")
	if got := answer(f)["pod"]; !strings.HasPrefix(got, "slow_start/") {
		t.Errorf("ready again: %q, want slow start", got)
	}
	heartbeat(t, f, "pod", gens["pod"], apiv1.HealthNotReady)
	if got := reason("pod"); got != "withdrawn RUNTIME_NOT_READY" {
		t.Errorf("a heartbeat not_ready: %s", got)
	}
	heartbeat(t, f, "pod", gens["pod"], "failing")
	if got := reason("pod"); got != "withdrawn SELF_REPORTED_FAILING" {
		t.Errorf("then failing: %s", got)
	}
	if _, err := f.reg.Register(context.Background(), &apiv1.RegisterRequest{InstanceID: "x", ServiceName: "s", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:1",
		Health: "sleepy", Capabilities: req.Capabilities}); err == nil || !strings.Contains(err.Error(), "not_ready") {
		t.Errorf("a registration with health sleepy: %v", err)
	}
}
