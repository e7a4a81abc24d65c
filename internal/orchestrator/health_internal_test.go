package orchestrator

import (
	"fmt"
	"math"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestTriggerStats(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var ts triggerStats
	// slice 10:00: 20 runs of 1..20 ms, the last two failed; slice 10:05: one run of 900 ms
	for i := 1; i <= 20; i++ {
		st := apiv1.RunSucceeded
		if i > 18 {
			st = apiv1.RunFailed
		}
		ts.record(&apiv1.Run{StartedAt: t0.Add(time.Duration(i) * time.Second), Status: st, DurationMS: float64(i)})
	}
	ts.record(&apiv1.Run{StartedAt: t0.Add(6 * time.Minute), Status: apiv1.RunSucceeded, DurationMS: 900})
	tests := []struct {
		name       string
		now        time.Time
		wantSlices int
		wantRate   float64
		wantP95    [2]float64 // within
	}{
		{"both slices", t0.Add(7 * time.Minute), 2, 19.0 / 21, [2]float64{19, 24}},
		{"a day later only the second", t0.Add(24*time.Hour + 4*time.Minute), 1, 1, [2]float64{900, 900}},
		{"two days later nothing", t0.Add(48 * time.Hour), 0, 0, [2]float64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ts.health("w", tt.now)
			if len(h.Slices) != tt.wantSlices || math.Abs(h.SuccessRate-tt.wantRate) > 1e-9 || h.P95MS < tt.wantP95[0] || h.P95MS > tt.wantP95[1] {
				t.Errorf("health = %d slices, rate %v, p95 %v; want %d, %v, p95 in %v", len(h.Slices), h.SuccessRate, h.P95MS, tt.wantSlices, tt.wantRate, tt.wantP95)
			}
		})
	}
	if h := ts.health("w", t0.Add(7*time.Minute)); h.Slices[0].P95MS < 19 || h.Slices[0].P95MS > 20*histGrowth || h.Slices[1].P95MS != 900 {
		t.Errorf("slice p95s = %v and %v, want about 19-20 ms and exactly the one run's 900", h.Slices[0].P95MS, h.Slices[1].P95MS)
	}
	rate, runs := ts.recent(t0.Add(7*time.Minute), 10*time.Minute)
	if runs != 21 || math.Abs(rate-19.0/21) > 1e-9 {
		t.Errorf("recent = %v over %d runs", rate, runs)
	}
	// what is persisted restores the same
	var back triggerStats
	back.restore(ts.kept())
	if a, b := ts.health("w", t0.Add(7*time.Minute)), back.health("w", t0.Add(7*time.Minute)); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("restored %v, want %v", b, a)
	}
}

// BenchmarkTriggerHealth100 is the trigger strips of 100 workflows with a run every minute
// for 24 hours (budget: 50 ms).
func BenchmarkTriggerHealth100(b *testing.B) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	stats := make([]triggerStats, 100)
	for w := range stats {
		for m := range 24 * 60 {
			st := apiv1.RunSucceeded
			if m%17 == 0 {
				st = apiv1.RunFailed
			}
			stats[w].record(&apiv1.Run{StartedAt: now.Add(-time.Duration(m) * time.Minute), Status: st, DurationMS: float64(5 + m%40)})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for w := range stats {
			if h := stats[w].health("w", now); len(h.Slices) < 287 {
				b.Fatal(len(h.Slices))
			}
		}
	}
}
