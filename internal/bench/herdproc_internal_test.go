package bench

import (
	"os"
	"runtime"
	"testing"
)

// threadsCPU reads this process's threads' run time, and it grows with work done.
func TestThreadsCPUGrows(t *testing.T) {
	before, err := threadsCPU(os.Getpid())
	if err != nil || before <= 0 {
		t.Fatalf("threadsCPU = %s, %v", before, err)
	}
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	after, err := threadsCPU(os.Getpid())
	if err != nil || after <= before {
		t.Fatalf("after work: %s (before %s), %v (%d)", after, before, err, x)
	}
}

func TestLongestPinned(t *testing.T) {
	full := 90 * float64(runtime.NumCPU())
	s := func(percents ...float64) []cpuSample {
		var out []cpuSample
		for _, p := range percents {
			out = append(out, cpuSample{secs: 1.5, percent: p})
		}
		return out
	}
	for _, tc := range []struct {
		samples []cpuSample
		want    float64
	}{
		{nil, 0},
		{s(full-1, full, full, 0, full), 3},
		{s(full, full, full), 4.5},
	} {
		if got := longestPinned(tc.samples); got != tc.want {
			t.Errorf("longestPinned(%v) = %g, want %g", tc.samples, got, tc.want)
		}
	}
}
