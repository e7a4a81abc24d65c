package server

import (
	"testing"
	"time"
)

// TestBuildCostIsCPU (Linux, where the thread clock is): with no BuildClock a build is charged the CPU its thread used, not the
// time it waited: a build that sleeps costs next to nothing, one that computes costs.
func TestBuildCostIsCPU(t *testing.T) {
	if _, ok := threadCPU(); !ok {
		t.Fatal("no thread clock: getrusage(RUSAGE_THREAD) failed")
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
