package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/bench"
)

// TestRunHerd runs a small herd through a real restart (about four seconds: the wave takes
// up to two 1-second heartbeat intervals after two intervals of drift).
func TestRunHerd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// 100 providers at the 5 s heartbeats of the quoted run: the peak per 100 providers scales
	// with the inverse of the interval, so the bar holds at the intervals it was set for.
	rep, err := bench.RunHerd(ctx, bench.HerdConfig{Providers: 100, HeartbeatInterval: 5 * time.Second})
	if err != nil {
		t.Fatalf("RunHerd: %v", err)
	}
	// Every agent came back, each with one successful re-registration.
	if rep.Attempts-rep.Failures != 100 || rep.PeakPerSecond < 1 || rep.AllBackAfter <= 0 {
		t.Errorf("report = %+v", rep)
	}
	t.Logf("all back after %.2f intervals, peak %.1f/s per 100 providers, median %s", rep.AllBackIntervals, rep.PeakPer100, rep.LatencyP50)
	// The bar docs/performance.md quotes, which the design gives whatever the machine: an
	// agent notices the restart within one heartbeat interval and waits a random part of one
	// more, so all are back within 2 intervals (plus the registration's own time), at a peak
	// under 50 a second per 100 providers, the median re-registration under 100 ms.
	if rep.AllBackIntervals > 2.2 {
		t.Errorf("all back after %.2f heartbeat intervals, the bar is 2", rep.AllBackIntervals)
	}
	if rep.PeakPer100 >= 50 {
		t.Errorf("peak %.1f registrations a second per 100 providers, the bar is under 50", rep.PeakPer100)
	}
	if rep.LatencyP50 >= 100*time.Millisecond {
		t.Errorf("median re-registration %s, the bar is under 100 ms", rep.LatencyP50)
	}
	var out bytes.Buffer
	if err := bench.WriteHerd(&out, rep); err != nil || !strings.Contains(out.String(), "all back after") {
		t.Errorf("WriteHerd = %q, %v", out.String(), err)
	}
}

// TestRestartUnderAHerdStillWithdrawsInBudget restarts a registry under 2,000 in-process
// agents and 100 watchers with a reconnection cap that makes the wave last about 20 seconds
// (at 300 a second, a CI run under -race on a loaded machine brought the agents back at 253 a
// second by themselves, and the cap never bound), and withdraws canaries in the middle of it: every agent comes back (none gives up), the
// cap sheds, and every withdrawal reaches every watcher within its 5 s budget.
func TestRestartUnderAHerdStillWithdrawsInBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 40 seconds (CI runs it: it never passes -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := bench.RunHerd(ctx, bench.HerdConfig{Providers: 2000, HeartbeatInterval: 3 * time.Second,
		ReconnectRate: 100, ReconnectBurst: 100, Watchers: 100, Canaries: 10, WithdrawEvery: 250 * time.Millisecond})
	if err != nil {
		t.Fatalf("RunHerd: %v", err)
	}
	t.Logf("back after %s, shed %d, withdrawals %d (missed %d): p50 %s, p99 %s", rep.AllBackAfter, rep.Shed, rep.Withdrawals,
		rep.WithdrawalsMissed, rep.WithdrawalP50, rep.WithdrawalP99)
	if rep.NotBack != 0 {
		t.Errorf("%d agents not back", rep.NotBack)
	}
	if rep.Shed == 0 {
		t.Error("the cap shed nothing: the wave was not capped")
	}
	if rep.Withdrawals == 0 || rep.WithdrawalsMissed != 0 {
		t.Errorf("withdrawals timed %d, missed %d: want some, none missed", rep.Withdrawals, rep.WithdrawalsMissed)
	}
	if rep.WithdrawalMax > 5*time.Second {
		t.Errorf("a withdrawal in the wave took %s, over its 5 s budget", rep.WithdrawalMax)
	}
}
