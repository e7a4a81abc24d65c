package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
)

// thirdsFleet is n instances of benchRequest's shape in three zones of n/3 each, judged,
// past slow start, on leases of 10 hours (the rounds move the clock, and nobody heartbeats).
func thirdsFleet(b *testing.B, n int) *fixture {
	b.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 10 * time.Hour, HeartbeatInterval: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	f := newFixture(b, registry.Config{Eligibility: m, LeaseTTL: 10 * time.Hour, HeartbeatInterval: time.Hour})
	for i := range n {
		req := benchRequest(i)
		req.Zone = string(rune('a' + i%3))
		mustRegister(b, f, req)
	}
	f.clock.Advance(31 * time.Second)
	if _, err := f.reg.Sweep(context.Background()); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkEvacuate is the API call that evacuates a zone of 20,000 instances (60,000 in
// three zones) and the one that ends it, in process: the safety check, the engine, one
// publication for the zone. Each round is a new identity (the calls are rate-limited per
// identity).
func BenchmarkEvacuate(b *testing.B) {
	f := thirdsFleet(b, 60000)
	var evacuate, end time.Duration
	i := 0
	for b.Loop() {
		ctx := registry.WithCaller(context.Background(), registry.Caller{Identity: fmt.Sprintf("ops-%d", i), Admin: true})
		i++
		t0 := time.Now()
		ev, err := f.reg.Evacuate(ctx, &apiv1.EvacuationRequest{Zone: "a", Duration: "1h", Reason: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := f.reg.EndEvacuation(ctx, ev.ID); err != nil {
			b.Fatal(err)
		}
		evacuate, end = evacuate+t1.Sub(t0), end+time.Since(t1)
		if ev.AffectedInstances != 20000 {
			b.Fatalf("%d instances affected, want 20000", ev.AffectedInstances)
		}
		f.clock.Advance(4 * time.Minute) // the way back is over before the next round
		if _, err := f.reg.Sweep(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(evacuate.Milliseconds())/float64(b.N), "evacuate-ms")
	b.ReportMetric(float64(end.Milliseconds())/float64(b.N), "end-ms")
}

// BenchmarkQueryDuringAnEvacuation is a discovery answer (100 instances of one capability,
// a third of them in the evacuated zone) with and without the evacuation: what an
// evacuation adds to every answer.
func BenchmarkQueryDuringAnEvacuation(b *testing.B) {
	f := thirdsFleet(b, 60000)
	q := &registry.Query{CapabilityID: "orders.s3"}
	for _, evacuated := range []bool{false, true} {
		if evacuated {
			if _, err := f.reg.Evacuate(context.Background(), &apiv1.EvacuationRequest{Zone: "a", Duration: "1h", Reason: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		want := 100
		if evacuated {
			want = 66
		}
		b.Run(fmt.Sprintf("evacuated=%v", evacuated), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := len(f.reg.Query(q).Entries); got != want {
					b.Fatalf("%d entries, want %d", got, want)
				}
			}
		})
	}
}
