package health

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkOutcomeBatch is one 10-second round of outcomes on the engine: instances in
// cohorts of 100 (one capability a cohort, one zone), each reported by 20 reporters at 50
// requests a window (comparable after two reporters), every instance failing 0.1 % but one
// in a hundred failing 4 % (ejected, back, ejected again), then the Tick that follows. It reports
// the cost per outcome (one instance in one reporter's batch) and the bytes the engine holds
// per instance once the window is full.
func BenchmarkOutcomeBatch(b *testing.B) {
	for _, n := range []int{6000, 60000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) { benchmarkOutcomeBatch(b, n, 20) })
	}
}

func benchmarkOutcomeBatch(b *testing.B, n, reporters int) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("i%d", i)
		e.Declare(Instance{ID: ids[i], Zone: "z", Capabilities: []string{fmt.Sprintf("c.%d", i/100)}})
		e.Apply(Event{At: t0, ID: ids[i], Kind: KindRegistered})
	}
	names := make([]string, reporters)
	for r := range names {
		names[r] = fmt.Sprintf("gw-%d", r)
	}
	now := t0.Add(40 * time.Second)
	e.Tick(now)
	round := func() {
		now = now.Add(10 * time.Second)
		for r, rep := range names {
			for i, id := range ids {
				errs := benchErrors(i, r)
				if err := e.Apply(Event{At: now, ID: id, Kind: KindOutcome, OK: 50 - errs, Errors: errs, Reporter: rep, LatencyMsP99: 12}); err != nil {
					b.Fatal(err)
				}
			}
		}
		e.Tick(now.Add(time.Second))
	}
	for range 6 { // a full window before the clock starts
		round()
	}
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*reporters), "ns/outcome")
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))/float64(n), "heap-B/instance")
	if n, _, by := e.windowAt(e.instances[ids[0]], now); n == 0 || len(by) != reporters {
		b.Fatalf("window of %s: %d requests from %d reporters", ids[0], n, len(by))
	}
}

// benchErrors is the errors of instance i in reporter r's window of 50 requests: 0.1 % of
// every instance's requests (one in 1,000: one of 20 reporters a window), 4 % of one
// instance in a hundred's.
func benchErrors(i, r int) int {
	if i%100 == 7 {
		return 2
	}
	if (i+r)%20 == 0 {
		return 1
	}
	return 0
}
