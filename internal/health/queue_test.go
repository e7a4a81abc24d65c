package health

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSweepMatchesAWalkOfTheFleet drives a monitor through random registrations, renewals
// (some instances stop renewing for good, some for a while), probes, deregistrations and
// forgets, with time moving by up to 20 s between sweeps, and checks after every sweep that
// what the queues and counters give is what a walk of the whole fleet gives: the renewal
// expectation, the instances counted as live, no lease left unexpired, every published
// verdict equal to the engine's verdict now, and the timeline's bucket of now holding the
// group as it is.
func TestSweepMatchesAWalkOfTheFleet(t *testing.T) {
	sawSP, sawExpiry := false, false
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			m := newTestMonitor(t, nil, nil)
			e := m.engine
			ids := make([]string, 40)
			gen := map[string]int64{}
			at := t0
			for i := range ids {
				ids[i] = fmt.Sprintf("i%02d", i)
				gen[ids[i]] = 1
				m.Register(Instance{ID: ids[i], Zone: "z", Capabilities: []string{"c.x"}, Probe: i%5 == 0}, 1, at)
			}
			silent := map[string]bool{}
			for step := range 2000 {
				at = at.Add(time.Duration(rng.IntN(20000)) * time.Millisecond)
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
						m.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, gen[id], at)
					case r < 88:
						m.Forget(id, at)
						gen[id]++
						m.Register(Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, gen[id], at)
					case r < 90:
						m.Observe(Event{At: at, ID: id, Kind: KindDeregistered})
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
				sawSP = sawSP || e.sp
				for _, in := range e.instances {
					sawExpiry = sawExpiry || !in.present
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
					if v.verdict.State != want.State || v.verdict.Weight != want.Weight {
						t.Fatalf("step %d: %s published %s/%d, the engine says %s/%d now", step, id, v.verdict.State, v.verdict.Weight, want.State, want.Weight)
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
	if !sawSP || !sawExpiry {
		t.Errorf("the walk never saw self-preservation (%v) or a lease end (%v): the fleet is too quiet to test either", sawSP, sawExpiry)
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
