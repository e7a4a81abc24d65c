package server

import (
	"runtime"
	"testing"
	"time"
)

// TestBuildCostIsCPU: with no BuildClock a build is charged the CPU its thread used, not the
// time it waited: a build that sleeps costs next to nothing, one that computes costs.
func TestBuildCostIsCPU(t *testing.T) {
	if _, ok := threadCPU(); !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no thread clock on Linux (getrusage RUSAGE_THREAD failed)")
		}
		// not a missing tool but another system (CI runs on Linux, where it fails instead)
		t.Skipf("no thread clock on %s: builds are timed by the wall clock", runtime.GOOS)
	}
	cost := buildCost(time.Now, nil)
	if got := cost(func() { time.Sleep(30 * time.Millisecond) }); got >= 15*time.Millisecond {
		t.Errorf("a build that slept 30ms cost %v of CPU, want well under it", got)
	}
	n := 0
	if got := cost(func() {
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); n++ {
		}
	}); got <= 0 {
		t.Errorf("a build that computed for 20ms (%d rounds) cost %v, want some CPU", n, got)
	}
	clocked := buildCost(time.Now, func() time.Duration { return 7 * time.Millisecond })
	if got := clocked(func() {}); got != 0 {
		t.Errorf("BuildClock that stands still: cost %v, want 0", got)
	}
}
