package health

import (
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// TestMonitorEvacuation: an evacuation is published as one revision for the whole zone, and
// the sweeps bring the zone back in its steps, one revision a step.
func TestMonitorEvacuation(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	var fleet Members
	for i, zone := range []string{"z1", "z1", "z1", "z2", "z2", "z2"} {
		in := Instance{ID: string(rune('a' + i)), Zone: zone, Capabilities: []string{"c.x"}}
		m.Register(in, 1, t0)
		fleet = append(fleet, Member{Instance: in, Generation: 1, RegisteredAt: t0, LastRenewal: t0})
	}
	at := t0.Add(20 * time.Second) // past the 10 s slow start
	m.Sync(at, fleet)
	rev, _ := m.Watch()
	if err := m.Operate(Event{At: at, Kind: KindEvacuate, Evacuation: "ev1", Zone: "z1", Until: at.Add(time.Hour), By: "ops", Why: "drill"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := m.Watch(); r != rev+1 {
		t.Errorf("the evacuation moved the revision by %d, want 1", r-rev)
	}
	for _, id := range []string{"a", "b", "c"} {
		if st, w, _ := m.Verdict(id); st != apiv1.EligibilityEvacuated || w != 0 {
			t.Errorf("%s after the evacuation: %s %d", id, st, w)
		}
	}
	if st, _, _ := m.Verdict("d"); st != apiv1.EligibilityServing {
		t.Errorf("d (z2) after the evacuation: %s", st)
	}
	end := at.Add(30 * time.Second)
	if err := m.Operate(Event{At: end, Kind: KindEvacuationEnded, Evacuation: "ev1"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{10, 25, 50, 100} {
		now := end.Add(time.Duration(i)*time.Minute + time.Second)
		for j := range fleet {
			m.Observe(Event{At: now, ID: fleet[j].ID, Kind: KindHeartbeat, Health: "ok"}) // the leases hold
			fleet[j].LastRenewal = now
		}
		rev, _ := m.Watch()
		m.Sync(now, fleet)
		if _, w, _ := m.Verdict("a"); w != want {
			t.Errorf("%s after the end: weight %d, want %d", now.Sub(end), w, want)
		}
		if r, _ := m.Watch(); i > 0 && r != rev+1 {
			t.Errorf("step %d moved the revision by %d, want 1", i, r-rev)
		}
	}
	if evs := m.Evacuations(end.Add(5 * time.Minute)); len(evs) != 0 {
		t.Errorf("evacuations once the way back is over: %+v", evs)
	}
}

// TestNeverAdmittedInAnEvacuatedZone: incarnations of a brand-new group (never admitted: the
// group's panic answer is all of them) in a zone an evacuation holds are published
// evacuated, and the group is not in panic: the zone gets no traffic even right after its
// instances registered. The engine's own verdict keeps the contract's precedence (unknown).
func TestNeverAdmittedInAnEvacuatedZone(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	for _, id := range []string{"a", "b"} {
		m.Register(Instance{ID: id, Zone: "z1", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	}
	var panicked bool
	m.Read(func(r Reader) { panicked = r.Panic("c.x", "z1") })
	if !panicked {
		t.Fatal("a brand-new group is not in panic before the evacuation")
	}
	if err := m.Operate(Event{At: t0.Add(time.Second), Kind: KindEvacuate, Evacuation: "ev1", Zone: "z1", Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := m.Verdict("a"); st != apiv1.EligibilityEvacuated {
		t.Errorf("published: %s, want evacuated", st)
	}
	m.Read(func(r Reader) { panicked = r.Panic("c.x", "z1") })
	if panicked {
		t.Error("the evacuated brand-new group is in panic")
	}
	if v := m.engine.Verdict("a", t0.Add(time.Second)); v.State != apiv1.EligibilityUnknown {
		t.Errorf("the engine's verdict: %s, want unknown (its precedence)", v.State)
	}
	if g := m.engine.Group("c.x", "z1", t0.Add(time.Second)); g.Panic || len(g.Instances) != 0 {
		t.Errorf("the engine's group answer: %+v", g)
	}
	ex, _ := m.Explain("a", t0.Add(2*time.Second))
	if ex.State != apiv1.EligibilityEvacuated || len(ex.Reasons) < 2 {
		t.Errorf("explanation: %+v", ex)
	}
}

// TestHistoryKeepsTheLastTransitions: once full, the history drops its oldest transition for
// each new one and stays in order (it is shifted in place).
func TestHistoryKeepsTheLastTransitions(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	in := Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}}
	m.Register(in, 1, t0)
	at := t0.Add(20 * time.Second) // past the slow start
	for i := range 30 {
		h := "degraded"
		if i%2 == 1 {
			h = "ok"
		}
		if err := m.Observe(Event{At: at.Add(time.Duration(i) * time.Second), ID: "a", Kind: KindHeartbeat, Health: h}); err != nil {
			t.Fatal(err)
		}
	}
	ex, _ := m.Explain("a", at.Add(30*time.Second))
	if len(ex.Transitions) != DefaultHistory {
		t.Fatalf("%d transitions kept, want %d", len(ex.Transitions), DefaultHistory)
	}
	for i := 1; i < len(ex.Transitions); i++ {
		if !ex.Transitions[i].At.After(ex.Transitions[i-1].At) {
			t.Fatalf("transitions out of order at %d: %v then %v", i, ex.Transitions[i-1].At, ex.Transitions[i].At)
		}
	}
	if last := ex.Transitions[len(ex.Transitions)-1]; last.To != apiv1.EligibilityServing || !last.At.Equal(at.Add(29*time.Second)) {
		t.Errorf("the last transition: %+v", last)
	}
}

// TestMonitorPublishesRelativeOutliers: a relative outlier is judged at the sweep after the
// outcomes (one judgment a cohort, not one an outcome) and its verdict is published then,
// though the outcome that made it one was about another instance.
func TestMonitorPublishesRelativeOutliers(t *testing.T) {
	m := newTestMonitor(t, nil, nil)
	var fleet Members
	for i := range 6 {
		in := Instance{ID: string(rune('a' + i)), Zone: "z", Capabilities: []string{"c.x"}}
		m.Register(in, 1, t0)
		fleet = append(fleet, Member{Instance: in, Generation: 1, RegisteredAt: t0, LastRenewal: t0})
	}
	at := t0.Add(20 * time.Second)
	m.Sync(at, fleet)
	for _, rep := range []string{"gw-1", "gw-2"} {
		for _, id := range []string{"f", "a", "b", "c", "d", "e"} { // f first: its peers' reports come after it
			ok, errs := 249, 1
			if id == "f" {
				ok, errs = 240, 10
			}
			m.Observe(Event{At: at, ID: id, Kind: KindOutcome, OK: ok, Errors: errs, Reporter: rep})
		}
	}
	rev, _ := m.Watch()
	m.Sync(at.Add(time.Second), fleet)
	if st, _, _ := m.Verdict("f"); st != apiv1.EligibilityWithdrawn {
		t.Errorf("f after the sweep: %s, want withdrawn", st)
	}
	if st, _, _ := m.Verdict("a"); st != apiv1.EligibilityServing {
		t.Errorf("a after the sweep: %s, want serving", st)
	}
	if r, _ := m.Watch(); r == rev {
		t.Error("the ejection was not published")
	}
}
