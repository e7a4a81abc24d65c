package health

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newTestMonitor(t *testing.T, reg prometheus.Registerer, on func(Transition)) *Monitor {
	t.Helper()
	m, err := NewMonitor(MonitorConfig{Registerer: reg, OnTransition: on, Engine: Config{SlowStart: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newUnslottedMonitor is newTestMonitor with every ramp weighed at each sweep and a
// follower's at the ramp clock itself (RampStep negative): what a ramp clock means, without
// the slots (TestSharedRampsMoveAServiceSlotAtATime has those).
func newUnslottedMonitor(t *testing.T) *Monitor {
	t.Helper()
	m, err := NewMonitor(MonitorConfig{RampStep: -1, Engine: Config{SlowStart: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func probeEv(id, result string, at time.Time) Event {
	return Event{At: at, ID: id, Kind: KindProbe, Result: result}
}

func TestMonitorPublishesVerdictsAndWakesWatchers(t *testing.T) {
	var told []Transition
	m := newTestMonitor(t, nil, func(tr Transition) {
		if tr.InstanceID == "a" { // not a group's panic
			told = append(told, tr)
		}
	})
	rev0, changed := m.Watch()
	m.Register(Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	select {
	case <-changed:
	default:
		t.Fatal("a registration did not wake the watchers")
	}
	if st, w, ok := m.Verdict("a"); !ok || st != apiv1.EligibilityUnknown || w != 0 {
		t.Fatalf("after registration: %s %d %v, want unknown 0", st, w, ok)
	}
	m.Observe(probeEv("a", ProbeOK, t0.Add(time.Second)))
	m.Observe(probeEv("a", ProbeOK, t0.Add(2*time.Second)))
	if st, w, _ := m.Verdict("a"); st != apiv1.EligibilitySlowStart || w != 10 {
		t.Fatalf("after two ok probes: %s %d, want slow_start 10", st, w)
	}
	m.Sync(t0.Add(7*time.Second), Members{{Instance: Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true},
		Generation: 1, RegisteredAt: t0, LastRenewal: t0}})
	if _, w, _ := m.Verdict("a"); w != 10+90*5/10 {
		t.Fatalf("slow start at 5 s of 10: weight %d, want %d", w, 10+90*5/10)
	}
	if rev, _ := m.Watch(); rev <= rev0 {
		t.Fatalf("revision %d did not advance past %d", rev, rev0)
	}
	m.Observe(probeEv("a", ProbeRefused, t0.Add(8*time.Second)))
	ex, ok := m.Explain("a", t0.Add(8*time.Second))
	if !ok {
		t.Fatal("no explanation")
	}
	if ex.State != apiv1.EligibilityWithdrawn || len(ex.Reasons) != 1 || ex.Reasons[0].Code != ReasonProbeRefused || !ex.Reasons[0].Evidence.At.Equal(t0.Add(8*time.Second)) {
		t.Fatalf("explanation %+v, want withdrawn by PROBE_REFUSED at 8 s", ex)
	}
	var path []string
	for _, tr := range ex.Transitions {
		path = append(path, tr.From+">"+tr.To)
	}
	if diff := cmp.Diff([]string{"absent>unknown", "unknown>slow_start", "slow_start>withdrawn"}, path); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	// The history the monitor keeps (in a compact form) gives back what it told, field by field.
	if diff := cmp.Diff(told, ex.Transitions); diff != "" {
		t.Errorf("the history against the transitions told (-told +history):\n%s", diff)
	}
	if !ex.Since.Equal(t0.Add(8 * time.Second)) {
		t.Errorf("since %s, want the withdrawal", ex.Since)
	}
}

func TestMonitorPanicPerGroup(t *testing.T) {
	var events []Transition
	m := newTestMonitor(t, nil, func(tr Transition) { events = append(events, tr) })
	for _, id := range []string{"a", "b", "c", "d"} {
		m.Register(Instance{ID: id, Zone: "z1", Capabilities: []string{"c.x"}}, 1, t0)
	}
	m.Register(Instance{ID: "e", Zone: "z2", Capabilities: []string{"c.x"}}, 1, t0)
	fail := func(id string) {
		m.Observe(Event{At: t0.Add(time.Second), ID: id, Kind: KindHeartbeat, Health: "failing"})
	}
	fail("a")
	fail("b")
	if m.Panic("c.x", "z1") {
		t.Fatal("2 of 4 in rotation is exactly half: not panic")
	}
	fail("c")
	if !m.Panic("c.x", "z1") {
		t.Fatal("1 of 4 in rotation: want panic")
	}
	if m.Panic("c.x", "z2") {
		t.Fatal("panic spilled into another zone")
	}
	found := false
	for _, e := range events {
		found = found || e.To == TransitionPanic
	}
	if !found {
		t.Error("no panic transition reported to OnTransition")
	}
	m.Forget("c", t0.Add(2*time.Second))
	if !m.Panic("c.x", "z1") {
		t.Error("1 of 3 in rotation after c left: want panic still")
	}
	m.Observe(Event{At: t0.Add(3 * time.Second), ID: "a", Kind: KindHeartbeat, Health: "ok"})
	if m.Panic("c.x", "z1") {
		t.Error("2 of 3 in rotation: want panic over")
	}
}

func TestMonitorSyncDeclaresRenewsAndForgets(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	in := Instance{ID: "x", Zone: "z", Capabilities: []string{"c.x"}}
	m.Sync(t0, Members{{Instance: in, Generation: 3, RegisteredAt: t0, LastRenewal: t0}})
	if st, _, ok := m.Verdict("x"); !ok || st != apiv1.EligibilitySlowStart {
		t.Fatalf("an instance seen only through Sync: %s %v, want slow_start", st, ok)
	}
	// renewed elsewhere (another replica): not silent, not evicted past the first lease
	m.Sync(t0.Add(80*time.Second), Members{{Instance: in, Generation: 3, RegisteredAt: t0, LastRenewal: t0.Add(75 * time.Second)}})
	m.Sync(t0.Add(100*time.Second), Members{{Instance: in, Generation: 3, RegisteredAt: t0, LastRenewal: t0.Add(75 * time.Second)}})
	if st, _, _ := m.Verdict("x"); st != apiv1.EligibilityServing {
		t.Fatalf("renewed through Sync: %s, want serving", st)
	}
	// a self-report that reached this replica through the store is judged at the sweep that
	// brings it, not when the verdict would next change by itself
	m.Sync(t0.Add(100*time.Second), Members{{Instance: in, Generation: 3, RegisteredAt: t0, LastRenewal: t0.Add(100 * time.Second), Health: "degraded"}})
	if st, w, _ := m.Verdict("x"); st != apiv1.EligibilityDegraded || w != 50 {
		t.Fatalf("a degraded self-report through Sync: %s/%d, want degraded/50", st, w)
	}
	m.Sync(t0.Add(101*time.Second), Members{})
	if _, _, ok := m.Verdict("x"); ok {
		t.Fatal("an instance gone from the fleet is still held")
	}
}

func TestMonitorMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := newTestMonitor(t, reg, nil)
	m.Register(Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	m.Register(Instance{ID: "b", Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	want := `
# HELP meshflows_eligibility_instances Instances by eligibility state.
# TYPE meshflows_eligibility_instances gauge
meshflows_eligibility_instances{state="absent"} 0
meshflows_eligibility_instances{state="degraded"} 0
meshflows_eligibility_instances{state="draining"} 0
meshflows_eligibility_instances{state="evacuated"} 0
meshflows_eligibility_instances{state="quarantined"} 0
meshflows_eligibility_instances{state="returning"} 0
meshflows_eligibility_instances{state="serving"} 0
meshflows_eligibility_instances{state="slow_start"} 1
meshflows_eligibility_instances{state="unknown"} 1
meshflows_eligibility_instances{state="withdrawn"} 0
# HELP meshflows_eligibility_self_preservation 1 while self-preservation suspends lease-expiry eviction.
# TYPE meshflows_eligibility_self_preservation gauge
meshflows_eligibility_self_preservation 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshflows_eligibility_instances", "meshflows_eligibility_self_preservation"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(m.metrics.transitions.WithLabelValues(apiv1.EligibilitySlowStart, ReasonSlowStart)); n != 1 {
		t.Errorf("transitions into slow_start: %v, want 1", n)
	}
	m.Register(Instance{ID: "c", Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	if n := testutil.ToFloat64(m.metrics.transitions.WithLabelValues(apiv1.EligibilitySlowStart, ReasonSlowStart)); n != 2 {
		t.Errorf("transitions into slow_start after a second: %v, want 2 (the counter kept from the first)", n)
	}
	m.Observe(Event{At: t0.Add(time.Second), ID: "b", Kind: KindOutcome, OK: 1, Errors: 29})
	if n := testutil.ToFloat64(m.metrics.ejections); n != 1 {
		t.Errorf("ejections after a window of 29 errors in 30: %v, want 1", n)
	}
}

// TestMonitorGroupCountersMatchTheEngine drives random evidence through a monitor and checks
// after every step that its incremental panic flags agree with the engine's Group, which
// counts from scratch.
func TestMonitorGroupCountersMatchTheEngine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newTestMonitor(t, nil, nil)
	caps := []string{"a.x", "b.x", "c.x"}
	zones := []string{"z1", "z2"}
	ids := make([]string, 30)
	decl := map[string]Instance{}
	for i := range ids {
		ids[i] = fmt.Sprintf("i%02d", i)
		in := Instance{ID: ids[i], Zone: zones[i%2], Capabilities: caps[:1+i%3], Probe: i%4 == 0}
		decl[ids[i]] = in
		m.Register(in, 1, t0)
	}
	gen := int64(1)
	at := t0
	for step := range 3000 {
		at = at.Add(50 * time.Millisecond) // 150 s in all: no lease ends, no quarantine ends
		id := ids[rng.IntN(len(ids))]
		switch r := rng.IntN(10); {
		case r < 3:
			m.Observe(Event{At: at, ID: id, Kind: KindHeartbeat, Health: []string{"ok", "degraded", "failing"}[rng.IntN(3)]})
		case r < 7:
			m.Observe(Event{At: at, ID: id, Kind: KindProbe, Result: []string{ProbeOK, ProbeOK, ProbeFail, ProbeRefused}[rng.IntN(4)]})
		case r < 8:
			gen++
			in := decl[id]
			in.Zone = zones[rng.IntN(2)] // a new incarnation may move
			decl[id] = in
			m.Register(in, gen, at)
		case r < 9:
			m.Forget(id, at)
			m.Register(decl[id], gen, at)
		default:
			m.Observe(Event{At: at, ID: id, Kind: KindDeregistered})
		}
		for _, c := range caps {
			for _, z := range zones {
				want := m.engine.Group(c, z, at).Panic
				if got := m.Panic(c, z); got != want {
					g := m.groups[groupKey{c, z}]
					t.Logf("counters %+v; engine %+v", g, m.engine.Group(c, z, at))
					for _, id := range ids {
						v := m.views[id]
						var keys []groupKey
						for _, g := range v.groups {
							keys = append(keys, g.key)
						}
						t.Logf("%s %v counted=%s verdict=%s engine=%s", id, keys, v.counted(), v.state, m.engine.Verdict(id, at).State)
					}
					t.Fatalf("step %d: panic(%s, %s) = %v, the engine counts %v", step, c, z, got, want)
				}
			}
		}
	}
}

func TestMonitorTakeChanged(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	m.Register(Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	if got := m.TakeChanged(); len(got) != 0 {
		t.Errorf("changes kept before anyone asked: %v", got)
	}
	m.Register(Instance{ID: "b", Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	m.Observe(Event{At: t0.Add(time.Second), ID: "a", Kind: KindHeartbeat, Health: "failing"})
	m.Observe(Event{At: t0.Add(2 * time.Second), ID: "a", Kind: KindHeartbeat, Health: "failing"}) // no change
	got := m.TakeChanged()
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a", "b"}, got); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
	if got := m.TakeChanged(); len(got) != 0 {
		t.Errorf("a second call: %v, want nothing new", got)
	}
}

// TestMonitorSelfPreservationLogQuotesTheDecision checks that the self-preservation log lines
// carry the numbers the decision used — renewals, expected, the instances expected to renew
// and why the mode changed — and that registrations that never renew are not among them.
func TestMonitorSelfPreservationLogQuotesTheDecision(t *testing.T) {
	var buf bytes.Buffer
	m, err := NewMonitor(MonitorConfig{Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
		Engine: Config{HeartbeatInterval: 10 * time.Second, LeaseTTL: 30 * time.Second, SlowStart: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%d", i)
		m.Register(Instance{ID: ids[i], Zone: "z", Capabilities: []string{"c.x"}}, int64(i+1), t0)
	}
	for i := range 50 { // a fleet that registers and never heartbeats
		m.Register(Instance{ID: fmt.Sprintf("mute%d", i), Zone: "z", Capabilities: []string{"c.x"}}, int64(100+i), t0)
	}
	for s := 10; s <= 40; s += 10 { // all renew until 40 s, then eight of ten fall silent
		for i, id := range ids {
			if s == 40 && i < 8 {
				continue
			}
			if err := m.Observe(Event{At: t0.Add(time.Duration(s) * time.Second), ID: id, Kind: KindHeartbeat, Health: "ok"}); err != nil {
				t.Fatal(err)
			}
		}
		m.Sync(t0.Add(time.Duration(s)*time.Second), nil)
	}
	if m.SelfPreservation() {
		t.Fatal("self-preservation at 40 s: the mute registrations were counted")
	}
	m.Sync(t0.Add(50*time.Second), nil)
	if !m.SelfPreservation() {
		t.Fatal("eight of ten renewing instances silent: no self-preservation")
	}
	var line struct {
		Msg      string  `json:"msg"`
		Reason   string  `json:"reason"`
		Ratio    float64 `json:"renewal_ratio"`
		Renewals int     `json:"renewals"`
		Expected float64 `json:"expected"`
		Live     int     `json:"renewing_instances"`
	}
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "self-preservation on") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	// window (20 s, 50 s]: 10 heartbeats at 30 s, 2 at 40 s; ten renewing instances, each
	// expected three times
	want := line
	want.Msg, want.Reason, want.Renewals, want.Expected, want.Live = "self-preservation on: lease expiry stops evicting", SelfPreservationRenewalsLow, 12, 30, 10
	want.Ratio = float64(want.Renewals) / want.Expected
	if diff := cmp.Diff(want, line); diff != "" || line.Ratio != want.Ratio {
		t.Fatalf("log line (-want +got):\n%s\nlog:\n%s", diff, buf.String())
	}
}

// TestFreshStackWarmsUp: instances that have not been probed yet put their group in panic,
// but the timeline says warming_up, not panic, until they have had their chance (10 s);
// unprobed after that, it is a panic.
func TestFreshStackWarmsUp(t *testing.T) {
	level := func(m *Monitor) string {
		tl := m.Timeline()
		if len(tl.Capabilities) != 1 {
			t.Fatalf("timeline %+v", tl)
		}
		b := tl.Capabilities[0].Buckets
		return b[len(b)-1].Level
	}
	m := newTestMonitor(t, nil, nil)
	for _, id := range []string{"a", "b"} {
		m.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	}
	m.Sync(t0.Add(time.Second), nil)
	if got := level(m); got != LevelWarmingUp {
		t.Fatalf("unprobed at 1 s: %s, want %s", got, LevelWarmingUp)
	}
	m2 := newTestMonitor(t, nil, nil) // the same fleet, still unprobed after the grace
	for _, id := range []string{"a", "b"} {
		m2.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	}
	m2.Sync(t0.Add(20*time.Second), nil)
	if got := level(m2); got != "panic" {
		t.Fatalf("unprobed at 20 s: %s, want panic", got)
	}
}

// TestMonitorLogsFirstVerdictsAtDebug checks the levels of the "eligibility" log lines: the
// steps every registration takes by itself (its first verdict, its admission, the end of its
// ramp) are at debug (a line per registration each; the journal keeps them), every other
// transition at info.
func TestMonitorLogsFirstVerdictsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	m, err := NewMonitor(MonitorConfig{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Engine: Config{SlowStart: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	in := Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true}
	m.Register(in, 1, t0)
	m.Observe(probeEv("a", ProbeOK, t0.Add(time.Second)))
	m.Observe(probeEv("a", ProbeOK, t0.Add(2*time.Second)))
	m.Observe(probeEv("a", ProbeRefused, t0.Add(3*time.Second)))
	m.Register(in, 2, t0.Add(4*time.Second)) // a new incarnation
	m.Observe(probeEv("a", ProbeOK, t0.Add(5*time.Second)))
	m.Observe(probeEv("a", ProbeOK, t0.Add(6*time.Second)))
	m.Sync(t0.Add(20*time.Second), nil) // the ramp ends
	m.Observe(probeEv("a", ProbeRefused, t0.Add(21*time.Second)))
	for i := range 6 { // healthy_after (unhealthy_after + 2) oks bring it back
		m.Observe(probeEv("a", ProbeOK, t0.Add(time.Duration(22+i)*time.Second)))
	}
	m.Sync(t0.Add(45*time.Second), nil) // the ramp after the recovery ends
	var got []string
	for l := range strings.Lines(buf.String()) {
		var line struct{ Level, Msg, From, To string }
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.Msg == "eligibility" {
			got = append(got, line.Level+" "+line.From+">"+line.To)
		}
	}
	// the new incarnation follows from the old one's verdict, not from absent: at info
	want := []string{"DEBUG absent>unknown", "DEBUG unknown>slow_start", "INFO slow_start>withdrawn", "INFO withdrawn>unknown",
		"DEBUG unknown>slow_start", "DEBUG slow_start>serving", "INFO serving>withdrawn", "INFO withdrawn>slow_start", "DEBUG slow_start>serving"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("eligibility log lines (-want +got):\n%s", diff)
	}
}

// TestMonitorSharesASlowStartByItsClock: the elected replica publishes a slow start once,
// with weight 0 and the instant its ramp began; it asks for its ramp clock (the instant of
// its sweep) to be published when the ramp moves or ends, not for the verdict, and the
// serving verdict the ramp ends in follows from the published slow start.
// A follower weighs the slow start at the ramp clock it was given — to the tenth, 10 to 90,
// whatever its own clock says — and answers serving once that clock is past the ramp. A
// step an earlier version published (a weight above 0) is still answered as published.
func TestMonitorSharesASlowStartByItsClock(t *testing.T) {
	in := Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true}
	leader := newUnslottedMonitor(t)
	leader.TakeChanged() // from now on changes are kept
	leader.Register(in, 1, t0.Add(-2*time.Second))
	leader.Observe(probeEv("a", ProbeOK, t0.Add(-time.Second)))
	leader.Observe(probeEv("a", ProbeOK, t0)) // admitted: slow start (10 s) from t0
	j, ok := leader.Judged("a")
	since := j.Since
	if !ok || j.State != apiv1.EligibilitySlowStart || j.Weight != 0 || !since.Equal(t0) || j.Derived {
		t.Fatalf("published at admission: %+v (%v), want slow_start 0 since %s, not derived", j, ok, t0)
	}
	if got := leader.TakeChanged(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("changed at admission: %v, want [a]", got)
	}
	leader.TakeRampMoved()

	newFollower := func(f Followed) *Monitor {
		m := newUnslottedMonitor(t)
		m.SetFollowing(true)
		m.Register(in, 1, t0.Add(-2*time.Second))
		m.Follow(f, t0)
		return m
	}
	follower := newFollower(Followed{ID: "a", Generation: 1, State: apiv1.EligibilitySlowStart, Since: since})
	earlier := newFollower(Followed{ID: "a", Generation: 1, State: apiv1.EligibilitySlowStart, Weight: 30, Since: since})
	for _, tc := range []struct {
		at          time.Duration // the leader's sweep, and the follower's own clock
		clock       time.Duration // the ramp clock the follower holds, from t0; -1 for none
		wantLeader  int
		wantMoved   bool
		wantChanged bool
		wantFollow  int
		wantEarlier int
	}{
		{at: 500 * time.Millisecond, clock: -1, wantLeader: 14, wantMoved: true, wantFollow: 10, wantEarlier: 30},
		{at: 1500 * time.Millisecond, clock: 1500 * time.Millisecond, wantLeader: 23, wantMoved: true, wantFollow: 20, wantEarlier: 30},
		{at: 1800 * time.Millisecond, clock: 1500 * time.Millisecond, wantLeader: 26, wantMoved: true, wantFollow: 20, wantEarlier: 30},
		{at: 5 * time.Second, clock: 5 * time.Second, wantLeader: 55, wantMoved: true, wantFollow: 50, wantEarlier: 30},
		{at: 9900 * time.Millisecond, clock: 9900 * time.Millisecond, wantLeader: 99, wantMoved: true, wantFollow: 90, wantEarlier: 30},
		// past the ramp on the follower's clock, before the ramp clock is
		{at: 10 * time.Second, clock: 9900 * time.Millisecond, wantLeader: 100, wantMoved: true, wantChanged: true, wantFollow: 90, wantEarlier: 100},
		{at: 10500 * time.Millisecond, clock: 10 * time.Second, wantLeader: 100, wantFollow: 100, wantEarlier: 100},
	} {
		t.Run(tc.at.String(), func(t *testing.T) {
			now := t0.Add(tc.at)
			leader.Sync(now, nil)
			if _, w, _ := leader.Verdict("a"); w != tc.wantLeader {
				t.Errorf("the elected replica answers %d, want %d", w, tc.wantLeader)
			}
			if at, got := leader.TakeRampMoved(); got != tc.wantMoved || got && !at.Equal(now) {
				t.Errorf("ramp moved: %v at %s, want %v (at the sweep, %s)", got, at, tc.wantMoved, now)
			}
			if got := leader.TakeChanged(); (len(got) > 0) != tc.wantChanged {
				t.Errorf("changed %v, want a change: %v", got, tc.wantChanged)
			}
			if tc.clock >= 0 {
				follower.SetRampClock(t0.Add(tc.clock), now)
			}
			for name, m := range map[string]*Monitor{"follower": follower, "follower of an earlier version": earlier} {
				m.Sync(now, nil)
				want := map[string]int{"follower": tc.wantFollow, "follower of an earlier version": tc.wantEarlier}[name]
				if _, w, _ := m.Verdict("a"); w != want {
					t.Errorf("the %s answers %d, want %d", name, w, want)
				}
			}
		})
	}
	if j, _ := leader.Judged("a"); j.State != apiv1.EligibilityServing || !j.Follows(Followed{State: apiv1.EligibilitySlowStart, Since: since}) ||
		j.Follows(Followed{State: apiv1.EligibilitySlowStart, Since: since.Add(time.Second)}) {
		t.Errorf("serving %+v must follow from the slow start published since %s, and from no other", j, since)
	}
	follower.Follow(Followed{ID: "a", Generation: 1, State: apiv1.EligibilityServing, Since: t0.Add(10 * time.Second)}, t0.Add(10*time.Second))
	if st, w, _ := follower.Verdict("a"); st != apiv1.EligibilityServing || w != 100 {
		t.Errorf("after the serving verdict the follower answers %s %d, want serving 100", st, w)
	}
}

func TestRampStep(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration
		want    int
	}{
		{-time.Hour, 10}, {0, 10}, {time.Second, 10}, {1112 * time.Millisecond, 20}, {5 * time.Second, 50},
		{9999 * time.Millisecond, 90}, {10 * time.Second, 90}, {time.Hour, 90},
	} {
		if got := rampStep(tc.elapsed, 10*time.Second); got != tc.want {
			t.Errorf("rampStep(%s of 10s) = %d, want %d", tc.elapsed, got, tc.want)
		}
	}
}

// TestMonitorDerivesTheFirstVerdict: an incarnation's first verdict is derived from its
// registration on every replica, so the elected replica need not publish it: Judged says
// when its verdict is still that one, and a follower answers it, weighed at the ramp clock,
// until a published verdict comes.
func TestMonitorDerivesTheFirstVerdict(t *testing.T) {
	plain := Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}}
	probed := plain
	probed.Probe = true
	for _, tc := range []struct {
		name        string
		in          Instance
		then        func(m *Monitor) // evidence after the registration at t0
		wantState   string
		wantDerived bool
	}{
		{name: "without a probe class", in: plain, wantState: apiv1.EligibilitySlowStart, wantDerived: true},
		{name: "with a probe class", in: probed, wantState: apiv1.EligibilityUnknown, wantDerived: true},
		{name: "admitted by its probes", in: probed, wantState: apiv1.EligibilitySlowStart, then: func(m *Monitor) {
			m.Observe(probeEv("a", ProbeOK, t0.Add(time.Second)))
			m.Observe(probeEv("a", ProbeOK, t0.Add(2*time.Second))) // the ramp begins here, not at the registration
		}},
		{name: "self-reported degraded", in: plain, wantState: apiv1.EligibilityDegraded, then: func(m *Monitor) {
			m.Observe(Event{At: t0.Add(time.Second), ID: "a", Kind: KindHeartbeat, Health: apiv1.HealthDegraded})
		}},
		{name: "registered again", in: plain, wantState: apiv1.EligibilitySlowStart, wantDerived: true, then: func(m *Monitor) {
			m.Sync(t0.Add(20*time.Second), nil)
			m.Register(plain, 2, t0.Add(20*time.Second))
		}},
		{name: "past its slow start", in: plain, wantState: apiv1.EligibilityServing, wantDerived: true, then: func(m *Monitor) {
			m.Sync(t0.Add(20*time.Second), nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMonitor(t, nil, nil)
			m.Register(tc.in, 1, t0)
			if tc.then != nil {
				tc.then(m)
			}
			j, ok := m.Judged("a")
			if !ok || j.State != tc.wantState || j.Derived != tc.wantDerived {
				t.Errorf("judged %+v (%v), want %s, derived %v", j, ok, tc.wantState, tc.wantDerived)
			}
		})
	}

	t.Run("a follower answers it", func(t *testing.T) {
		for _, tc := range []struct {
			in    Instance
			clock time.Duration // the ramp clock, from the registration
			state string
			want  int
		}{
			{in: plain, clock: -time.Second, state: apiv1.EligibilitySlowStart, want: 10},
			{in: plain, clock: 5 * time.Second, state: apiv1.EligibilitySlowStart, want: 50},
			{in: plain, clock: 9999 * time.Millisecond, state: apiv1.EligibilitySlowStart, want: 90},
			{in: plain, clock: 10 * time.Second, state: apiv1.EligibilityServing, want: 100},
			{in: probed, clock: time.Hour, state: apiv1.EligibilityUnknown, want: 0},
		} {
			m := newUnslottedMonitor(t)
			m.SetFollowing(true)
			m.SetRampClock(t0.Add(tc.clock), t0)
			var first [2]any
			m.Read(func(rd Reader) { // before the monitor holds it
				s, w := rd.First(tc.in.Service, tc.in.Probe, t0)
				first = [2]any{s, w}
			})
			m.Register(tc.in, 1, t0)
			m.Sync(t0.Add(2*time.Hour), nil) // its own clock does not move the answer
			if ramping := tc.state == apiv1.EligibilitySlowStart; (len(m.ramping) == 1) != ramping {
				t.Errorf("%+v at the ramp clock %s: %d views a new clock weighs again, want them only while it ramps", tc.in, tc.clock, len(m.ramping))
			}
			st, w, _ := m.Verdict("a")
			if got := [2]any{st, w}; got != [2]any{tc.state, tc.want} || first != got {
				t.Errorf("%+v at the ramp clock %s: answered %v, %v before the monitor held it; want %s %d", tc.in, tc.clock, got, first, tc.state, tc.want)
			}
			m.Read(func(rd Reader) {
				if _, _, ok := rd.VerdictAt("a", 2); ok {
					t.Errorf("a verdict on generation 2, which the monitor does not hold")
				}
			})
			if ex, _ := m.Explain("a", t0); ex.State != tc.state || tc.state != apiv1.EligibilityServing &&
				(len(ex.Reasons) != 1 || !strings.Contains(ex.Reasons[0].Evidence.Detail, "derived from the registration")) {
				t.Errorf("explained %s %+v, want %s, the derived first verdict", ex.State, ex.Reasons, tc.state)
			}
			m.Follow(Followed{ID: "a", Generation: 1, State: apiv1.EligibilityServing, Since: t0.Add(time.Minute)}, t0.Add(2*time.Hour))
			if st, w, _ := m.Verdict("a"); st != apiv1.EligibilityServing || w != 100 {
				t.Errorf("after the serving verdict: %s %d, want serving 100", st, w)
			}
		}
	})
}
