package bench

import (
	"os"
	"testing"
)

func TestStatusMemory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     string
		rss, peak  int64
		wantsError bool
	}{
		{name: "a process", status: "Name:\tmeshflows\nVmPeak:\t 2090284 kB\nVmHWM:\t   65216 kB\nVmRSS:\t   28264 kB\nRssAnon:\t    5488 kB\n",
			rss: 28264 << 10, peak: 65216 << 10},
		{name: "the order does not matter", status: "VmRSS: 1 kB\nVmHWM: 2 kB", rss: 1 << 10, peak: 2 << 10},
		{name: "a kernel thread has neither", status: "Name:\tkthreadd\nState:\tS (sleeping)\n", wantsError: true},
		{name: "no peak", status: "VmRSS:\t 28264 kB\n", wantsError: true},
		{name: "another unit", status: "VmRSS:\t 28264 MB\nVmHWM:\t 28264 kB\n", wantsError: true},
		{name: "not a number", status: "VmRSS:\t lots kB\nVmHWM:\t 28264 kB\n", wantsError: true},
		{name: "negative", status: "VmRSS:\t -1 kB\nVmHWM:\t 28264 kB\n", wantsError: true},
		{name: "empty", status: "", wantsError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rss, peak, err := statusMemory(tc.status)
			if tc.wantsError {
				if err == nil {
					t.Fatalf("statusMemory = %d, %d, nil; want an error", rss, peak)
				}
				return
			}
			if err != nil || rss != tc.rss || peak != tc.peak {
				t.Fatalf("statusMemory = %d, %d, %v; want %d, %d", rss, peak, err, tc.rss, tc.peak)
			}
		})
	}
}

// TestProcMemoryOfThisProcess reads this test's own /proc entry: what --server-pid reads.
func TestProcMemoryOfThisProcess(t *testing.T) {
	rss, peak, err := procMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss {
		t.Fatalf("rss %d, peak %d: want 0 < rss <= peak", rss, peak)
	}
}
