package health

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkOutcomeBatch is one 10-second round of outcomes on the engine: 6,000 instances in
// 60 cohorts of 100 (one capability a cohort, one zone), each reported by 20 reporters at
// 50 requests a window (comparable after two reporters), then the Tick that follows. It
// reports the cost per outcome.
func BenchmarkOutcomeBatch(b *testing.B) {
	e, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	const n, reporters = 6000, 20
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("i%d", i)
		e.Declare(Instance{ID: ids[i], Zone: "z", Capabilities: []string{fmt.Sprintf("c.%d", i/100)}})
		e.Apply(Event{At: t0, ID: ids[i], Kind: KindRegistered})
	}
	now := t0.Add(40 * time.Second)
	e.Tick(now)
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		now = now.Add(10 * time.Second)
		for r := range reporters {
			rep := fmt.Sprintf("gw-%d", r)
			for i, id := range ids {
				if err := e.Apply(Event{At: now, ID: id, Kind: KindOutcome, OK: 49 + i%2, Errors: 1 - i%2, Reporter: rep}); err != nil {
					b.Fatal(err)
				}
			}
		}
		e.Tick(now.Add(time.Second))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*reporters), "ns/outcome")
}
