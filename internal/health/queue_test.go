package health

import (
	apiv1 "github.com/meshflows/meshflows/api/v1"

	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestSweepMatchesAWalkOfTheFleet drives a monitor through random registrations, renewals
// (some instances stop renewing for good, some for a while, some renew through another
// replica and the store), probes, deregistrations and forgets, with time moving by up to
// 20 s between sweeps, and checks after every sweep that what the queues and counters give
// is what a walk of the whole fleet gives: the renewal expectation, the instances counted as
// live, no lease left unexpired, every published verdict (state, weight and reasons) equal
// to the engine's verdict now, and the timeline's bucket of now holding the group as it is.
func TestSweepMatchesAWalkOfTheFleet(t *testing.T) {
	sawSP, sawExpiry := false, false
	// A slow start of 10 s ends before a heartbeat is missed; one of 2 m outlasts silences
	// and lease ends, which end the weight-only sweeps of a ramping instance (reweigh).
	for _, slowStart := range []time.Duration{10 * time.Second, 2 * time.Minute} {
		for _, seed := range []uint64{1, 2, 3, 4} {
			walkTheFleet(t, slowStart, -1, seed, &sawSP, &sawExpiry)
		}
	}
	if !sawSP || !sawExpiry {
		t.Errorf("the walk never saw self-preservation (%v) or a lease end (%v): the fleet is too quiet to test either", sawSP, sawExpiry)
	}
}

// TestSlottedRampsLagByAStepAtMost is TestSweepMatchesAWalkOfTheFleet for a monitor whose
// ramps are weighed at their services' slots (the default) and that Advances at every slot of
// a step between the sweeps: every published verdict is the engine's now, except that a
// ramp's weight, and its end, may lag by one step — never more, and never ahead.
func TestSlottedRampsLagByAStepAtMost(t *testing.T) {
	var sawSP, sawExpiry bool
	for _, slowStart := range []time.Duration{10 * time.Second, 2 * time.Minute} {
		for _, seed := range []uint64{1, 2, 3, 4} {
			walkTheFleet(t, slowStart, time.Second, seed, &sawSP, &sawExpiry)
		}
	}
	if !sawSP || !sawExpiry {
		t.Errorf("the walk never saw self-preservation (%v) or a lease end (%v): the fleet is too quiet to test either", sawSP, sawExpiry)
	}
}

// walkTheFleet is one walk of TestSweepMatchesAWalkOfTheFleet: with a negative rampStep,
// every verdict is weighed at every sweep and must be the engine's; with a positive one, the
// monitor Advances at every slot of it and a ramp may lag by a step (lagsByAStep).
func walkTheFleet(t *testing.T, slowStart, rampStep time.Duration, seed uint64, sawSP, sawExpiry *bool) {
	t.Run(fmt.Sprintf("slow_start=%s/seed=%d", slowStart, seed), func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m, err := NewMonitor(MonitorConfig{Engine: Config{SlowStart: slowStart}, RampStep: rampStep})
		if err != nil {
			t.Fatal(err)
		}
		e := m.engine
		ids := make([]string, 40)
		gen := map[string]int64{}
		inst, regAt := map[string]Instance{}, map[string]time.Time{} // the latest incarnation's
		at := t0
		register := func(in Instance) {
			inst[in.ID], regAt[in.ID] = in, at
			m.Register(in, gen[in.ID], at)
		}
		for i := range ids {
			ids[i] = fmt.Sprintf("i%02d", i)
			gen[ids[i]] = 1
			register(Instance{ID: ids[i], Zone: "z", Capabilities: []string{"c.x"}, Probe: i%5 == 0})
		}
		silent := map[string]bool{}
		for step := range 2000 {
			next := at.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
			for rampStep > 0 && at.Add(rampStep/rampSlots).Before(next) {
				at = at.Add(rampStep / rampSlots)
				m.Advance(at)
			}
			at = next
			for range rng.IntN(30) {
				id := ids[rng.IntN(len(ids))]
				switch r := rng.IntN(100); {
				case r < 60:
					if !silent[id] {
						m.Observe(Event{At: at, ID: id, Kind: KindHeartbeat, Health: []string{"ok", "ok", "ok", "degraded", "failing"}[rng.IntN(5)]})
					}
				case r < 75:
					m.Observe(Event{At: at, ID: id, Kind: KindProbe, Result: []string{ProbeOK, ProbeOK, ProbeFail}[rng.IntN(3)]})
				case r < 80:
					silent[id] = !silent[id]
				case r < 85:
					gen[id]++
					register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}})
				case r < 88:
					m.Forget(id, at)
					gen[id]++
					register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}})
				case r < 90:
					m.Observe(Event{At: at, ID: id, Kind: KindDeregistered})
				case r < 95:
					if !silent[id] { // renewed through another replica: the store tells this one
						m.SyncChanged(at, Members{{Instance: inst[id], Generation: gen[id], RegisteredAt: regAt[id], LastRenewal: at,
							Health: []string{"ok", "ok", "degraded", "failing"}[rng.IntN(4)]}}, nil)
					}
				}
			}
			// the decision counts the fleet as it is before this sweep's leases end
			window := e.cfg.LeaseTTL
			live, expected := 0, 0.0
			for _, in := range e.instances {
				if in.present && !in.draining && in.renewed {
					live++
					expected += float64(min(window, sinceNanos(at, in.registeredAt))) / float64(e.cfg.HeartbeatInterval)
				}
			}
			m.Sync(at, nil)
			*sawSP = *sawSP || e.sp
			for _, in := range e.instances {
				*sawExpiry = *sawExpiry || !in.present
				if !e.sp && in.present && !in.draining && e.expired(in, at) {
					t.Fatalf("step %d: %s's lease ended at %s and it is still present", step, in.ID, instant(in.lastRenewal).Add(window))
				}
			}
			d := e.SelfPreservationDecision()
			if d.Live != live || math.Abs(d.Expected-expected) > 1e-6 {
				t.Fatalf("step %d: live %d expected %.6f; a walk gives %d, %.6f", step, d.Live, d.Expected, live, expected)
			}
			if got, want := m.Panic("c.x", "z"), e.Group("c.x", "z", at).Panic; got != want {
				t.Fatalf("step %d: panic flag %v, the engine says %v", step, got, want)
			}
			for id, v := range m.views {
				want := e.Verdict(id, at)
				if got := v.verdict(); rampStep > 0 && lagsByAStep(e, v, got, want, at, rampStep) {
					continue
				}
				if got := v.verdict(); got.State != want.State || got.Weight != want.Weight || !slices.Equal(got.Reasons, want.Reasons) {
					t.Fatalf("step %d: %s published %s/%d %v, the engine says %s/%d %v now", step, id, got.State, got.Weight, got.Reasons,
						want.State, want.Weight, want.Reasons)
				}
			}
			// the timeline's bucket of now holds the group as it is now (a sample skipped
			// when nothing moved would miss a change)
			if g := m.groups[groupKey{"c.x", "z"}]; g != nil {
				tl := m.Timeline()
				if len(tl.Capabilities) != 1 {
					t.Fatalf("step %d: timeline %+v", step, tl)
				}
				bs := tl.Capabilities[0].Buckets
				b := bs[len(bs)-1]
				if !b.Start.Equal(at.Truncate(m.cfg.TimelineBucket)) || b.Instances < g.members || b.MinInRotation > g.inRotation ||
					m.panics[g.key] && b.Level != "panic" && b.Level != LevelWarmingUp {
					t.Fatalf("step %d at %s: the timeline's last bucket is %+v; the group has %d members, %d in rotation, panic %v",
						step, at, b, g.members, g.inRotation, m.panics[g.key])
				}
			}
		}
		if n := m.due.len(); n > 4*len(ids) {
			t.Errorf("the due queue holds %d entries for %d instances", n, len(ids))
		}
		if n := e.leases.len() + e.young.len(); n > 4*len(ids) {
			t.Errorf("the engine's queues hold %d entries for %d instances", n, len(ids))
		}
	})
}

// TestEngineQueuesFollowTheFleet re-registers and renews the same instances over and over
// within one lease, beside a few that register once: the engine's lease and young queues,
// where every earlier incarnation used to wait for its instant, stay near the fleet's size,
// and every incarnation the engine holds keeps an entry that holds in each.
func TestEngineQueuesFollowTheFleet(t *testing.T) {
	m, err := NewMonitor(MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := m.engine
	// the first stable instances register once: their entries, the oldest in each queue,
	// hold throughout, while the others' earlier entries go stale
	const fleet, stable, rounds = 100, 10, 200
	holding := func(q *instanceQueue, holds func(int64, incarnation) bool) map[string]bool {
		ids := map[string]bool{}
		q.q.Walk(math.MaxInt64, func(at int64, inc incarnation) {
			if holds(at, inc) {
				ids[inc.in.ID] = true
			}
		})
		return ids
	}
	at := t0
	mostLeases, mostYoung := 0, 0
	for round := range rounds {
		for i := range fleet {
			id := fmt.Sprintf("i%03d", i)
			if i >= stable || round == 0 {
				m.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, int64(round+1), at)
				m.Observe(Event{At: at, ID: id, Kind: KindHeartbeat}) // counted young: an entry in the young queue
			}
			mostLeases, mostYoung = max(mostLeases, e.leases.len()), max(mostYoung, e.young.len())
			// checked every seventh registration: a lost entry stays lost until its instance
			// registers again, a hundred registrations later
			if step := round*fleet + i; step%7 != 0 {
				continue
			}
			leases, young := holding(&e.leases, leaseHolds), holding(&e.young, youngHolds)
			for id, in := range e.instances {
				if !leases[id] || in.live == liveYoung && !young[id] {
					t.Fatalf("round %d: %s (present %v, counted %v) lost its entry: in the lease queue %v, in the young queue %v",
						round, id, in.present, in.live, leases[id], young[id])
				}
			}
		}
		at = at.Add(10 * time.Millisecond)
	}
	// 1,024 entries over the fleet before a queue is tidied at all, then a few entries
	// looked at per push keep it near that
	if bound := 2*fleet + 1024; mostLeases > bound || mostYoung > bound {
		t.Errorf("the lease queue held up to %d entries and the young queue %d for %d instances registered %d times each (bound %d)",
			mostLeases, mostYoung, fleet, rounds, bound)
	}
	if len(e.instances) != fleet {
		t.Fatalf("the engine holds %d instances, want %d", len(e.instances), fleet)
	}
}

// lagsByAStep reports whether got, v's published verdict, is its ramp as it was at most a
// step before now, where the engine says want: in the same state (slow start, or degraded
// while ramping) at a weight between the ramp's a step ago and want's, or in slow start
// when the ramp ended within the step.
func lagsByAStep(e *Engine, v *view, got, want Verdict, now time.Time, step time.Duration) bool {
	if v.rampFrom == 0 || got.State != apiv1.EligibilitySlowStart && got.State != apiv1.EligibilityDegraded {
		return false
	}
	elapsed := sinceNanos(now, v.rampFrom)
	floor := e.rampWeight(max(elapsed-step, 0))
	switch {
	case got.State == want.State:
		return got.Weight <= want.Weight && got.Weight >= min(floor, want.Weight) && slices.Equal(got.Reasons, want.Reasons)
	case got.State == apiv1.EligibilitySlowStart && want.State == apiv1.EligibilityServing:
		return elapsed >= e.cfg.SlowStart && elapsed < e.cfg.SlowStart+step && got.Weight >= floor
	}
	return false
}

// TestDueQueue checks the queue's two places: an entry pushed due by the last take's limit
// waits in the list for the next take, unless it is later than that take's limit (a clock
// ahead of the sweep's); one pushed later waits in the heap; stale entries never come out.
func TestDueQueue(t *testing.T) {
	type push struct {
		at int64
		id int
	}
	for _, tc := range []struct {
		name  string
		first int64 // the limit of a take before the pushes
		push  []push
		takes []int64
		want  [][]int // the views each take yields, by id
	}{
		{"due at once: the next take", 100, []push{{100, 0}, {50, 1}}, []int64{100}, [][]int{{0, 1}}},
		{"ahead of the next take: a later one", 100, []push{{90, 0}, {100, 1}}, []int64{95, 100}, [][]int{{0}, {1}}},
		{"in the heap until due", 100, []push{{300, 0}, {200, 1}}, []int64{150, 250, 300}, [][]int{nil, {1}, {0}}},
		{"queued again earlier: once, at the earlier", 100, []push{{300, 0}, {80, 0}}, []int64{100, 400}, [][]int{{0}, nil}},
		{"queued again later: the earlier entry is stale", 100, []push{{80, 0}, {300, 0}}, []int64{100, 400}, [][]int{nil, {0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q dueQueue
			q.takeDue(time.Unix(0, tc.first), func(*view) { t.Fatal("an empty queue yielded a view") })
			views := []*view{{}, {}}
			for _, p := range tc.push {
				v := views[p.id]
				v.queued, v.queuedAt = true, p.at
				q.push(p.at, v, 0)
			}
			for i, limit := range tc.takes {
				var got []int
				q.takeDue(time.Unix(0, limit), func(v *view) { got = append(got, slices.Index(views, v)) })
				slices.Sort(got)
				if !slices.Equal(got, tc.want[i]) {
					t.Errorf("take %d at %d: %v, want %v", i, limit, got, tc.want[i])
				}
			}
		})
	}
}

func TestDueAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Time
		want int64
	}{
		{"an instant", time.Unix(1_700_000_000, 5), 1_700_000_000_000_000_005},
		{"never", never, dueNever},
		{"past 2262", time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), dueNever},
		{"the zero instant", time.Time{}, dueNow},
		{"before 1678", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), dueNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dueAt(tc.at); got != tc.want {
				t.Errorf("dueAt(%v) = %d, want %d", tc.at, got, tc.want)
			}
		})
	}
}

// TestViewLayout holds the view to the layout a sweep of a million views in slow start
// relies on: 192 bytes (a multiple of a cache line, so that every view begins one), with
// everything reweigh reads and writes in the first 64.
func TestViewLayout(t *testing.T) {
	var v view
	if size := unsafe.Sizeof(v); size != 192 {
		t.Errorf("a view is %d bytes, want 192", size)
	}
	if end := unsafe.Offsetof(v.synced) + unsafe.Sizeof(v.synced); end > 64 || unsafe.Offsetof(v.state) != 64 {
		t.Errorf("the sweep's fields end at byte %d and the rest begins at %d, want 64 for both", end, unsafe.Offsetof(v.state))
	}
}

// TestDueQueueFollowsTheFleet: a fleet of a hundred under churn — an instance deregistered
// and a new one registered, over and over, with leases far longer than the churn — keeps
// the monitor's due queue near the fleet's size. A forgotten view's entry, due at its lease's
// end, used to wait there for it with the view and the engine's record behind it: under an
// evacuation's churn and a 15-minute lease, hundreds of megabytes.
func TestDueQueueFollowsTheFleet(t *testing.T) {
	m, err := NewMonitor(MonitorConfig{Engine: Config{LeaseTTL: 90 * time.Minute, HeartbeatInterval: 30 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	const fleet, churn = 100, 5000
	at := t0
	register := func(i int) {
		id := fmt.Sprintf("i%05d", i)
		m.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, 1, at)
		m.Observe(Event{At: at, ID: id, Kind: KindHeartbeat})
	}
	for i := range fleet {
		register(i)
	}
	most := 0
	for i := range churn {
		m.Forget(fmt.Sprintf("i%05d", i), at)
		register(fleet + i)
		at = at.Add(500 * time.Millisecond) // each instance lives 50 s: past its slow start
		if i%2 == 0 {
			m.Sync(at, nil) // a sweep a second: views judged, and queued at their next instant
		}
		most = max(most, m.due.len())
	}
	if len(m.views) != fleet {
		t.Fatalf("the monitor holds %d views, want %d", len(m.views), fleet)
	}
	if bound := 2*fleet + 1024; most > bound {
		t.Errorf("the due queue held up to %d entries for a fleet of %d after %d replacements (bound %d)", most, fleet, churn, bound)
	}
}

// TestRampsMoveAServiceSlotAtATime: a fleet whose every instance ramps at once (a registry
// restart, an evacuation's churn) moves its services' weights a slot of the services at each
// slot of the step — each service once a step, in its slot — and not all at every sweep:
// each move answers the long polls of the services it touches.
func TestRampsMoveAServiceSlotAtATime(t *testing.T) {
	const step = time.Second
	m, err := NewMonitor(MonitorConfig{RampStep: step})
	if err != nil {
		t.Fatal(err)
	}
	var touched map[string]bool
	m.OnPublish(func(_ int64, ins []Instance, all bool) {
		if all {
			t.Fatal("a publication said every answer changed")
		}
		for _, in := range ins {
			touched[in.Service] = true
		}
	})
	services := map[string]uint8{}
	for s := range 40 {
		svc := fmt.Sprintf("svc-%02d", s)
		services[svc] = rampPhase(svc)
		for i := range 3 {
			m.Register(Instance{ID: fmt.Sprintf("%s-%d", svc, i), Zone: "z", Capabilities: []string{"c." + svc}, Service: svc}, 1, t0)
		}
	}
	phases := map[uint8]bool{}
	for _, p := range services {
		phases[p] = true
	}
	if len(phases) < 5 {
		t.Fatalf("40 services fall in %d slots of %d", len(phases), rampSlots)
	}
	moves := map[string]int{}
	const ticks = 5 * rampSlots // five steps, within the 30 s ramp
	for tick := 1; tick <= ticks; tick++ {
		now := t0.Add(time.Duration(tick) * step / rampSlots)
		touched = map[string]bool{}
		if tick%rampSlots == 0 {
			m.Sync(now, nil) // the sweep moves its slot's services alone, too
		} else {
			m.Advance(now)
		}
		slot := uint8(now.UnixNano() / int64(step/rampSlots) % rampSlots)
		for svc := range touched {
			if services[svc] != slot {
				t.Errorf("tick %d (slot %d): %s moved; its slot is %d", tick, slot, svc, services[svc])
			}
			moves[svc]++
		}
	}
	for svc := range services {
		if moves[svc] < ticks/rampSlots-1 || moves[svc] > ticks/rampSlots {
			t.Errorf("%s moved %d times in %d steps", svc, moves[svc], ticks/rampSlots)
		}
	}
}

// TestSharedRampsMoveAServiceSlotAtATime: with a store that shares verdicts, the elected
// replica's ramps move a slot of services at each Advance too, and the ramp clock it
// publishes moves a follower's ramps a slot at a time: each clock comes back through the
// store with the instances it moved (SetRampClock), and those are of the services of the
// slot passed alone, on either replica — the store tells their long polls, not the fleet's.
// A follower never ends a ramp before the elected replica did, and every ramp ends.
func TestSharedRampsMoveAServiceSlotAtATime(t *testing.T) {
	const step = time.Second
	newMonitor := func() *Monitor {
		m, err := NewMonitor(MonitorConfig{RampStep: step})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	leader, follower := newMonitor(), newMonitor()
	leader.TakeChanged() // from now on it keeps what the others must hear
	follower.SetFollowing(true)
	services := map[string]uint8{} // by instance id: the slot of its service
	for s := range 40 {
		svc := fmt.Sprintf("svc-%02d", s)
		for i := range 3 {
			in := Instance{ID: fmt.Sprintf("%s-%d", svc, i), Zone: "z", Capabilities: []string{"c." + svc}, Service: svc}
			services[in.ID] = rampPhase(svc)
			leader.Register(in, 1, t0)
			follower.Register(in, 1, t0) // its first verdict, a slow start, derived: weighed at the clock
		}
	}
	ramp := leader.cfg.Engine.SlowStart
	followerMoves := map[string]int{}
	ticks := int((ramp + 2*step) / (step / rampSlots))
	for tick := 1; tick <= ticks; tick++ {
		now := t0.Add(time.Duration(tick) * step / rampSlots)
		if tick%rampSlots == 0 {
			leader.Sync(now, nil)
		} else {
			leader.Advance(now)
		}
		slot := uint8(now.UnixNano() / int64(step/rampSlots) % rampSlots)
		at, moved := leader.TakeRampMoved()
		if !moved {
			continue
		}
		if !at.Equal(now) {
			t.Fatalf("tick %d: the clock published is %s, want the Advance's instant %s", tick, at, now)
		}
		for name, m := range map[string]*Monitor{"elected replica": leader, "follower": follower} {
			for _, id := range m.SetRampClock(at, now) {
				if services[id] != slot {
					t.Errorf("tick %d (slot %d): the clock moved %s on the %s; its slot is %d", tick, slot, id, name, services[id])
				}
				if m == follower {
					followerMoves[id]++
				}
			}
		}
		for id := range services {
			ls, lw, _ := leader.Verdict(id)
			fs, fw, _ := follower.Verdict(id)
			if fs == apiv1.EligibilityServing && ls != apiv1.EligibilityServing {
				t.Errorf("tick %d: the follower ended %s's ramp (%s %d) before the elected replica (%s %d)", tick, id, fs, fw, ls, lw)
			}
		}
	}
	for id := range services {
		if st, _, _ := follower.Verdict(id); st != apiv1.EligibilityServing {
			t.Errorf("%s is %s on the follower after its ramp", id, st)
		}
		if st, _, _ := leader.Verdict(id); st != apiv1.EligibilityServing {
			t.Errorf("%s is %s on the elected replica after its ramp", id, st)
		}
		// nine tenths (20 to 90) and the end, one clock each
		if n := followerMoves[id]; n != 9 {
			t.Errorf("%s moved %d times on the follower, want 9 (20 … 90, serving)", id, n)
		}
	}
}

// TestARampEndedBetweenSlotsReachesTheFollowers: evidence judges an instance on the elected
// replica between two slots of its service, after its slow start's end: it ends there, at
// once, while a follower weighs it at its slot of the clock, which has not passed the end yet.
// A step later one more clock is published, which has: the follower ends it too, although
// no other ramp moved in between. It fails without that clock.
func TestARampEndedBetweenSlotsReachesTheFollowers(t *testing.T) {
	const step = time.Second
	newMonitor := func() *Monitor {
		m, err := NewMonitor(MonitorConfig{RampStep: step, Engine: Config{SlowStart: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	leader, follower := newMonitor(), newMonitor()
	leader.TakeChanged()
	follower.SetFollowing(true)
	in := Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Service: "svc", Probe: true}
	leader.Register(in, 1, t0.Add(-2*time.Second))
	leader.Observe(probeEv("a", ProbeOK, t0.Add(-time.Second)))
	leader.Observe(probeEv("a", ProbeOK, t0)) // admitted: slow start from t0
	follower.Register(in, 1, t0.Add(-2*time.Second))
	follower.Follow(Followed{ID: "a", Generation: 1, State: apiv1.EligibilitySlowStart, Since: t0}, t0) // as the elected replica publishes it
	clock := func(now time.Time) {
		if at, moved := leader.TakeRampMoved(); moved {
			leader.SetRampClock(at, now)
			follower.SetRampClock(at, now)
		}
	}
	tick := func(now time.Time) { leader.Advance(now); clock(now) }
	now := t0
	for ; now.Before(t0.Add(10 * time.Second)); now = now.Add(step / 10) {
		tick(now)
	}
	// the ramp ends at t0+10s; the slot of "svc" comes later in this step
	phase := rampPhase(in.Service)
	if phase == 0 {
		t.Fatalf("the test wants a service whose slot is not the step's first")
	}
	end := t0.Add(10*time.Second + step/20) // between the step's first two slots
	leader.Observe(probeEv("a", ProbeOK, end))
	if st, _, _ := leader.Verdict("a"); st != apiv1.EligibilityServing {
		t.Fatalf("the elected replica answers %s after the probe past the ramp, want serving", st)
	}
	clock(end)
	if st, w, _ := follower.Verdict("a"); st != apiv1.EligibilitySlowStart {
		t.Fatalf("the follower answers %s %d before its slot passed the end, want slow start", st, w)
	}
	for now = t0.Add(10*time.Second + step/10); !now.After(end.Add(2 * step)); now = now.Add(step / 10) {
		tick(now)
		if st, _, _ := follower.Verdict("a"); st == apiv1.EligibilityServing {
			if now.Before(end.Add(step)) {
				t.Errorf("the follower ended the ramp at %s, before a clock a step after the end (%s)", now, end.Add(step))
			}
			return
		}
	}
	t.Errorf("the follower still ramps %s after the elected replica ended it", now.Sub(end))
}
