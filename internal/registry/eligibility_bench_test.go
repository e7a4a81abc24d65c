package registry_test

import (
	"context"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
)

// judgedFleet is n instances of benchRequest's shape over three zones — a holds 2/3 of
// them (40,000 of 60,000: the zone evacuation), b and c a sixth each — on a registry with
// the eligibility engine, past slow start.
func judgedFleet(b *testing.B, n int) (*fixture, []int64) {
	b.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	f := newFixture(b, registry.Config{Eligibility: m})
	gens := make([]int64, n)
	for i := range n {
		req := benchRequest(i)
		req.Zone = zoneOf(i)
		gens[i] = mustRegister(b, f, req).Generation
	}
	f.clock.Advance(31 * time.Second)
	if _, err := f.reg.Sweep(context.Background()); err != nil {
		b.Fatal(err)
	}
	return f, gens
}

func zoneOf(i int) string {
	switch i % 6 {
	case 4:
		return "b"
	case 5:
		return "c"
	}
	return "a"
}

// percentiles reports the p50 and p99 of ds (nanoseconds) on b.
func percentiles(b *testing.B, ds []time.Duration, what string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), what+"-p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), what+"-p99-ns")
}

// BenchmarkEligibilityEvidence is evidence to published verdict: one heartbeat that changes
// an instance's state (failing, then ok) through Registry.Heartbeat, at 60,000 instances.
// When it returns, discovery answers the new verdict and long polls are woken.
func BenchmarkEligibilityEvidence(b *testing.B) {
	f, gens := judgedFleet(b, 60000)
	ids := instanceIDs(len(gens))
	ctx := context.Background()
	var lat []time.Duration
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		id := i % len(gens)
		h := apiv1.HealthFailing
		if (i/len(gens))%2 == 1 {
			h = apiv1.HealthOK
		}
		start := time.Now()
		if _, err := f.reg.Heartbeat(ctx, ids[id], &apiv1.HeartbeatRequest{Generation: gens[id], Health: h}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	percentiles(b, lat, "evidence-to-verdict")
}

// BenchmarkEligibilitySweep is one sweep of a quiet fleet of -fleet instances (60,000): time (slow start,
// lease expiry, self-preservation), the panic flags, a timeline sample. The clock moves 100 µs
// a sweep so that no lease ends within the sweeps a benchmark runs (a million sweeps are
// 100 s of the clock; BenchmarkEligibilityMinute has the fleet renewing, and changing).
func BenchmarkEligibilitySweep(b *testing.B) {
	f, _ := judgedFleet(b, *fleet)
	ctx := context.Background()
	n, _ := f.reg.Store().Counts()
	b.ReportAllocs()
	for b.Loop() {
		f.clock.Advance(100 * time.Microsecond)
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if left, _ := f.reg.Store().Counts(); left != n {
		b.Fatalf("%d of %d instances were evicted during the benchmark: it measured a shrinking fleet", n-left, n)
	}
}

// BenchmarkEligibilitySweepSlowStart is one sweep of a fleet of -fleet instances (60,000)
// that all registered within the last seconds, as after a registry restart: every instance
// is in slow start, its weight ramping (10 + 90 × elapsed / slow start, a step every 333 ms
// at 30 s), so every sweep weighs every instance again, and one sweep in three or four
// (the clock moves 100 ms a sweep) finds every weight a step higher: the p99 of the sweeps
// (sweep-p99-ns) is such a sweep, as every sweep is at the registry's one a second. Before
// 25 s of the ramp have passed, the fleet registers again (untimed), for a new one.
func BenchmarkEligibilitySweepSlowStart(b *testing.B) {
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	f := newFixture(b, registry.Config{Eligibility: m})
	ctx := context.Background()
	var start time.Time
	ramp := func() {
		for i := range *fleet {
			req := benchRequest(i)
			req.Zone = zoneOf(i)
			mustRegister(b, f, req)
		}
		f.clock.Advance(time.Second)
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		start = f.clock.Now()
		if st, w, _ := m.Verdict("inst-0"); st != apiv1.EligibilitySlowStart || w > 13 {
			b.Fatalf("a second into the ramp, an instance is %s at weight %d: not in slow start", st, w)
		}
		runtime.GC() // the registrations' garbage is not collected during the sweeps timed
	}
	ramp()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		if f.clock.Now().Sub(start) >= 25*time.Second {
			b.StopTimer()
			ramp()
			b.StartTimer()
		}
		f.clock.Advance(100 * time.Millisecond)
		t := time.Now()
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	percentiles(b, lat, "sweep")
}

// BenchmarkEligibilityRampsEnd is the sweep that ends the slow start of a fleet of -fleet
// instances (60,000) that registered together, with the journal recording every transition
// as the registry does: each instance goes from slow start to serving, its transition
// counted, kept in its history and journaled. After a restart, the fleet's ramps end over
// as many sweeps as its registrations took. ns/instance is one ramp's end.
func BenchmarkEligibilityRampsEnd(b *testing.B) {
	j := journal.New(journal.DefaultMax, nil)
	m, err := health.NewMonitor(health.MonitorConfig{OnTransition: journal.FromTransitions(j)})
	if err != nil {
		b.Fatal(err)
	}
	// leases of an hour: no expiry of an earlier round's incarnations falls due in the sweeps timed
	f := newFixture(b, registry.Config{Eligibility: m, Journal: j, LeaseTTL: time.Hour})
	ctx := context.Background()
	ends := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range *fleet {
			mustRegister(b, f, benchRequest(i))
		}
		f.clock.Advance(time.Second)
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		f.clock.Advance(30 * time.Second)
		runtime.GC() // the registrations' garbage is not collected during the sweep timed
		b.StartTimer()
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
		ends += *fleet
	}
	if st, _, _ := m.Verdict("inst-0"); st != apiv1.EligibilityServing {
		b.Fatalf("after the sweep, an instance is %s: its ramp did not end", st)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ends), "ns/instance")
}

// BenchmarkZoneEvacuation withdraws every instance of zone a (40,000 of 60,000) as fast as
// the evidence arrives, with a watcher that long-polls the registry in a loop and reads the
// answer, as a gateway does: the burst's length, how long after the first withdrawal the
// watcher wakes and holds its answer (10,000 entries of zone b), and how long after the last
// one it holds a revision that includes it.
func BenchmarkZoneEvacuation(b *testing.B) {
	f, gens := judgedFleet(b, 60000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var inZone []int
	for i := range gens {
		if zoneOf(i) == "a" {
			inZone = append(inZone, i)
		}
	}
	ids := instanceIDs(len(gens))
	type seen struct {
		woke, at time.Time // woken, answered
		rev      int64
	}
	seenc := make(chan seen, 1<<16)
	go func() { // the watcher
		q, _ := registry.ParseQuery(map[string][]string{"capability_id": {"orders.read"}, "zone": {"b"}})
		rev := f.reg.State().Revision
		for ctx.Err() == nil {
			rev = f.reg.Wait(ctx, "", rev, time.Minute)
			woke := time.Now()
			ans := f.reg.Query(q)
			select {
			case seenc <- seen{woke, time.Now(), ans.Revision}:
			default:
			}
		}
	}()
	var burst, firstWoken, firstWake, lastWake []time.Duration
	round := 0
	for b.Loop() {
		h := apiv1.HealthFailing
		if round%2 == 1 {
			h = apiv1.HealthOK // the zone comes back: the next round evacuates it again
		}
		round++
	drain:
		for {
			select {
			case <-seenc:
			default:
				break drain
			}
		}
		start := time.Now()
		for _, i := range inZone {
			if _, err := f.reg.Heartbeat(ctx, ids[i], &apiv1.HeartbeatRequest{Generation: gens[i], Health: h}); err != nil {
				b.Fatal(err)
			}
		}
		end := time.Now()
		last := f.reg.State().Revision
		burst = append(burst, end.Sub(start))
		first := true
		for s := range seenc {
			if first {
				firstWoken = append(firstWoken, s.woke.Sub(start))
				firstWake = append(firstWake, s.at.Sub(start))
				first = false
			}
			if s.rev >= last {
				lastWake = append(lastWake, max(0, s.at.Sub(end)))
				break
			}
		}
	}
	percentiles(b, burst, "burst")
	percentiles(b, firstWoken, "first-withdrawal-to-wake")
	percentiles(b, firstWake, "first-withdrawal-to-watcher")
	percentiles(b, lastWake, "last-withdrawal-to-watcher")
}

// BenchmarkEligibilityMemory is the heap the eligibility engine adds per instance at -fleet.
func BenchmarkEligibilityMemory(b *testing.B) {
	for b.Loop() {
		var before, mid, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		plain, _ := fill(b, *fleet)
		runtime.GC()
		runtime.ReadMemStats(&mid)
		judged, _ := judgedFleet(b, *fleet)
		runtime.GC()
		runtime.ReadMemStats(&after)
		withEngine := float64(after.HeapAlloc - mid.HeapAlloc)
		without := float64(mid.HeapAlloc - before.HeapAlloc)
		b.ReportMetric((withEngine-without)/float64(*fleet), "engine-heap-bytes/instance")
		runtime.KeepAlive(plain)
		runtime.KeepAlive(judged)
	}
}

// BenchmarkEligibilityQuery is BenchmarkQuery's first case (100 of -fleet) on a registry
// that judges: the answer's entries carry verdicts and out-of-rotation ones are left out.
func BenchmarkEligibilityQuery(b *testing.B) {
	f, _ := judgedFleet(b, *fleet)
	q := &registry.Query{CapabilityID: "orders.s3"}
	b.ReportAllocs()
	for b.Loop() {
		if got := len(f.reg.Query(q).Entries); got != 100 {
			b.Fatalf("%d entries, want 100", got)
		}
	}
}

// BenchmarkEligibilityMinute is one minute of a 60,000-instance registry's eligibility work
// on the fake clock: 60 sweeps, the fleet's renewals (every instance heartbeats every 30 s:
// 2,000 a second) and 2,500 state changes (an instance's heartbeat flips between failing and
// ok), spread evenly. The %-of-a-core metric is the share of one core it takes.
func BenchmarkEligibilityMinute(b *testing.B) {
	f, gens := judgedFleet(b, 60000)
	ctx := context.Background()
	n := len(gens)
	ids := instanceIDs(n)
	failing := make([]bool, n)
	hb := func(i int) {
		h := apiv1.HealthOK
		if failing[i] {
			h = apiv1.HealthFailing
		}
		if _, err := f.reg.Heartbeat(ctx, ids[i], &apiv1.HeartbeatRequest{Generation: gens[i], Health: h}); err != nil {
			b.Fatal(err)
		}
	}
	changes, renewed := 0, 0
	for b.Loop() {
		for s := range 60 {
			f.clock.Advance(time.Second)
			for range n / 30 {
				hb(renewed % n)
				renewed++
			}
			for range 2500*(s+1)/60 - 2500*s/60 {
				i := (changes * 7919) % n // spread over the fleet
				failing[i] = !failing[i]
				hb(i)
				changes++
			}
			if _, err := f.reg.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/60e9*100, "%-of-a-core")
}

// BenchmarkEligibilityHeartbeat is BenchmarkHeartbeat's parallel case on a registry that
// judges: renewals that change no verdict, from every core, at -fleet instances. The fleet
// has renewed once before the timer starts, as a running fleet has: an instance's first
// renewal also enters it among those expected to renew (self-preservation's count), once in
// its life; timed with the others, a million of them were a third of a 3-million-op run.
func BenchmarkEligibilityHeartbeat(b *testing.B) {
	f, gens := judgedFleet(b, *fleet)
	ctx := context.Background()
	ids := instanceIDs(len(gens))
	for i, id := range ids {
		if _, err := f.reg.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: gens[i], Health: apiv1.HealthOK}); err != nil {
			b.Fatal(err)
		}
	}
	// Building a million instances leaves a collection of a heap of gigabytes to finish,
	// which would run, with its write barriers, during the timed renewals (they allocate
	// nothing).
	runtime.GC()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1)) % len(gens)
			if _, err := f.reg.Heartbeat(ctx, ids[i], &apiv1.HeartbeatRequest{Generation: gens[i], Health: apiv1.HealthOK}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEligibilityWalk is BenchmarkEligibilitySweep with the fleet walked at every sweep,
// as a replica over etcd walks it whenever the store's revision moved since its last sweep.
func BenchmarkEligibilityWalk(b *testing.B) {
	f, _ := judgedFleet(b, *fleet)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		f.clock.Advance(100 * time.Microsecond)
		f.reg.WalkFleetAtNextSweep()
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutcomeReports is one 10-second round of outcome reports at the registry: 60,000
// instances (benchRequest's shape: three capabilities each, over three zones), each reported
// by 20 reporters in batches of 1,000 (Registry.Outcomes: validation, the incarnation check,
// the engine), every instance failing 0.1 % and one in a hundred 4 %, then the sweep that
// judges the cohorts. It reports the cost per instance reported (one outcome of one batch).
func BenchmarkOutcomeReports(b *testing.B) {
	const n, reporters = 60000, 20
	f, gens := judgedFleet(b, n)
	batches := make([][][]apiv1.Outcome, reporters) // by reporter
	for r := range reporters {
		for from := 0; from < n; from += apiv1.MaxOutcomes {
			batch := make([]apiv1.Outcome, 0, apiv1.MaxOutcomes)
			for i := from; i < min(n, from+apiv1.MaxOutcomes); i++ {
				errs := 0
				switch {
				case i%100 == 7:
					errs = 2
				case (i+r)%20 == 0:
					errs = 1
				}
				batch = append(batch, apiv1.Outcome{InstanceID: benchRequest(i).InstanceID, Generation: gens[i], OK: 50 - errs, Errors: errs, LatencyMsP99: 12})
			}
			batches[r] = append(batches[r], batch)
		}
	}
	ctx := context.Background()
	round := func() {
		for r := range reporters {
			for _, batch := range batches[r] {
				req := &apiv1.OutcomesRequest{GatewayID: "gw-" + string(rune('a'+r)), Outcomes: batch}
				if _, err := f.reg.Outcomes(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		}
		f.clock.Advance(10 * time.Second)
		if _, err := f.reg.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 6 { // a full outlier window first
		round()
	}
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*reporters), "ns/instance-reported")
}
