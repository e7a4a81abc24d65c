package registry_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/registry"
)

// benchSizes are the registry sizes measured: 1,000 and -fleet (60,000 unless told).
// `go test -run '^$' -bench . ./internal/registry -args -fleet=1000000` gives the figures at one
// million instances (several GiB of memory and minutes of set-up).
func benchSizes() []int { return []int{1000, *fleet} }

var fleet = flag.Int("fleet", 60000, "instances in the large fleet of the benchmarks")

// benchRequest is instance i of a fleet: 100 instances per service, three capabilities each
// (the first is shared by the whole fleet, the second by the instance's service, the third
// by the whole fleet in three versions).
func benchRequest(i int) *apiv1.RegisterRequest {
	svc := fmt.Sprintf("svc-%d", i/100)
	return request(fmt.Sprintf("inst-%d", i), svc,
		capability("orders.read", "grpc", "2.0.0", `{"owner":"team-a","build":"1234"}`),
		capability("orders."+fmt.Sprintf("s%d", i/100), "http", "1.0.0", `{"path":"/v1/orders"}`),
		capability("audit.write", "kafka", fmt.Sprintf("1.%d.0", i%3), ""))
}

// instanceIDs returns the ids benchRequest gives instances 0..n-1.
func instanceIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("inst-%d", i)
	}
	return ids
}

func fill(b *testing.B, n int) (*fixture, []int64) {
	b.Helper()
	f := newFixture(b, registry.Config{})
	gens := make([]int64, n)
	for i := range n {
		gens[i] = mustRegister(b, f, benchRequest(i)).Generation
	}
	return f, gens
}

func BenchmarkRegister(b *testing.B) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			f, _ := fill(b, n)
			reqs := make([]*apiv1.RegisterRequest, n)
			for i := range reqs {
				reqs[i] = benchRequest(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// re-registration of existing instances keeps the size at n
				if _, err := f.reg.Register(ctx, reqs[i%n]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkHeartbeat(b *testing.B) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			f, gens := fill(b, n)
			ids := instanceIDs(n)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := f.reg.Heartbeat(ctx, ids[i%n], &apiv1.HeartbeatRequest{Generation: gens[i%n], Health: "ok"}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("instances=%d/parallel", n), func(b *testing.B) {
			f, gens := fill(b, n)
			ids := instanceIDs(n)
			ctx := context.Background()
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919 // spread the workers over the fleet
				for pb.Next() {
					k := i % n
					if _, err := f.reg.Heartbeat(ctx, ids[k], &apiv1.HeartbeatRequest{Generation: gens[k]}); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

func BenchmarkQuery(b *testing.B) {
	for _, n := range benchSizes() {
		f, _ := fill(b, n)
		queries := map[string]*registry.Query{
			// 100 matching instances among n: the capability only svc-3 offers
			"capability": {CapabilityID: "orders.s3"},
			// 100 of n, through the service index (what peerbench asks)
			"capability+service": {CapabilityID: "orders.read", ServiceName: "svc-3"},
			// 100 of n in three versions: the full sort order, not the replicas' fast path
			"capability+service/3-versions": {CapabilityID: "audit.write", ServiceName: "svc-3"},
		}
		for name, q := range queries {
			b.Run(fmt.Sprintf("instances=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if got := len(f.reg.Query(q).Entries); got != 100 {
						b.Fatalf("%d entries, want 100", got)
					}
				}
			})
		}
	}
}

// BenchmarkMemoryPerInstance reports the live heap each registered instance (three
// capabilities, one manifest-free registration) costs at -fleet instances.
func BenchmarkMemoryPerInstance(b *testing.B) {
	n := *fleet
	reqs := make([]*apiv1.RegisterRequest, n)
	for i := range reqs {
		reqs[i] = benchRequest(i)
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := newFixture(b, registry.Config{})
		for _, r := range reqs {
			mustRegister(b, f, r)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-bytes/instance")
		runtime.KeepAlive(f)
	}
}

// BenchmarkRestoreSnapshot measures loading a snapshot file of -fleet instances.
func BenchmarkRestoreSnapshot(b *testing.B) {
	dir := b.TempDir()
	f := newFixture(b, registry.Config{SnapshotDir: dir})
	f.clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: snapshots are written
	for i := range *fleet {
		mustRegister(b, f, benchRequest(i))
	}
	wrote, err := f.reg.WriteSnapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		g := newFixture(b, registry.Config{})
		if _, err := g.reg.RestoreSnapshot(context.Background(), wrote.Path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSnapshot writes a snapshot of the large fleet (-fleet): the time and the
// memory it takes, which at a million instances is what every --snapshot-interval costs.
func BenchmarkWriteSnapshot(b *testing.B) {
	f := newFixture(b, registry.Config{SnapshotDir: b.TempDir(), SnapshotKeep: 1})
	f.clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: snapshots are written
	for i := range *fleet {
		mustRegister(b, f, benchRequest(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		f.clock.Advance(time.Second) // a file name of its own
		wrote, err := f.reg.WriteSnapshot(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(wrote.Path)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

// BenchmarkWatchFanOut measures one change waking 1,000 and 10,000 parked long polls: the
// time from the registration to the last waiter's return.
func BenchmarkWatchFanOut(b *testing.B) {
	for _, waiters := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			f := newFixture(b, registry.Config{})
			ctx := context.Background()
			i := 0
			for b.Loop() {
				b.StopTimer()
				rev := f.reg.State().Revision
				var wg sync.WaitGroup
				for range waiters {
					wg.Go(func() { f.reg.Wait(ctx, "", rev, time.Hour) })
				}
				for f.reg.Watchers() < int64(waiters) {
					runtime.Gosched()
				}
				b.StartTimer()
				mustRegister(b, f, benchRequest(i))
				wg.Wait()
				i++
			}
		})
	}
}

// benchAfterChange times ask after a registration moved the revision, in fleets of
// benchSizes plus the 100 instances extra returns (for 0..99).
func benchAfterChange(b *testing.B, extra func(i int) *apiv1.RegisterRequest, ask func(b *testing.B, f *fixture)) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			f, _ := fill(b, n)
			for i := range 100 {
				mustRegister(b, f, extra(i))
			}
			again := benchRequest(0)
			for b.Loop() {
				b.StopTimer()
				mustRegister(b, f, again) // a new incarnation: the revision moves
				b.StartTimer()
				ask(b, f)
			}
		})
	}
}

// BenchmarkProbeTargets: the prober's question after a registration moved the revision, in a
// fleet where 100 instances declare a health probe and the rest none.
func BenchmarkProbeTargets(b *testing.B) {
	benchAfterChange(b, func(i int) *apiv1.RegisterRequest {
		req := request(fmt.Sprintf("probed-%d", i), "svc-probed")
		req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "svc-probed", Instance: req.InstanceID, Version: "0.1.3"},
			Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "5s", UnhealthyAfter: apiv1.Int(2)}}
		return req
	}, func(b *testing.B, f *fixture) {
		if got := len(f.reg.ProbeTargets()); got != 100 {
			b.Fatalf("%d targets, want 100", got)
		}
	})
}

// BenchmarkRoutes: the answer every gateway asks for after a registration moved the revision
// (GET /v1/discovery/routes), in a fleet where 100 instances publish a manifest and a public
// path and the rest neither.
func BenchmarkRoutes(b *testing.B) {
	benchAfterChange(b, func(i int) *apiv1.RegisterRequest {
		id := fmt.Sprintf("routed-%d", i)
		req := request(id, "svc-routed", capability("routed.publish", "http", "1.0.0", `{"public_paths":["/api/routed/publish"]}`))
		req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "svc-routed", Instance: id, Version: "0.1.3"},
			Routes: []apiv1.ManifestRoute{{Path: "/api/routed/publish", Methods: []string{"POST"}}}}
		return req
	}, func(b *testing.B, f *fixture) {
		if got := f.reg.Routes(); len(got.Manifests) != 100 || len(got.PublicPaths) != 100 {
			b.Fatalf("%d manifests and %d public paths, want 100 of each", len(got.Manifests), len(got.PublicPaths))
		}
	})
}

// BenchmarkQueryAll is the unfiltered answer, every instance in or out of rotation (what a
// DNS or an xDS server watches): three entries per instance, in the answer's full order.
func BenchmarkQueryAll(b *testing.B) {
	for _, n := range benchSizes() {
		f, _ := fill(b, n)
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := len(f.reg.Query(&registry.Query{IncludeAll: true}).Entries); got != 3*n {
					b.Fatalf("%d entries, want %d", got, 3*n)
				}
			}
		})
	}
}

// BenchmarkSummary is what a console asks of the catalog (GET /v1/catalog/summary with the
// console's 500 rows), against what it read before: the whole catalog, encoded as the
// registry writes it.
func BenchmarkSummary(b *testing.B) {
	for _, n := range benchSizes() {
		f, _ := fill(b, n)
		for _, tc := range []struct {
			name string
			q    registry.SummaryQuery
		}{
			{"unfiltered", registry.SummaryQuery{Limit: 500}},
			{"one-service", registry.SummaryQuery{ServiceName: "svc-7", Limit: 500}},
		} {
			b.Run(fmt.Sprintf("instances=%d/%s", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if got := f.reg.Summary(tc.q); got.Total != n {
						b.Fatalf("total %d, want %d", got.Total, n)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("instances=%d/whole-catalog", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				head, _, all := f.reg.CatalogStream()
				_, err := apijson.List(apijson.CatalogHead(make([]byte, 0, apijson.Chunk+4096), &head), all, 0, apijson.InstanceValue,
					func(piece []byte) ([]byte, error) { return piece[:0], nil })
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueryWarmingUp is one service's answer (100 instances) while the registry warms
// up and a tenth of the fleet was deregistered and registered again meanwhile (a rolling
// deployment during a restart): the answer lists the removals of the epoch that concern it.
func BenchmarkQueryWarmingUp(b *testing.B) {
	for _, n := range benchSizes() {
		f, gens := fill(b, n)
		ctx := context.Background()
		for i := 0; i < n; i += 10 {
			if err := f.reg.Deregister(ctx, fmt.Sprintf("inst-%d", i), gens[i]); err != nil {
				b.Fatal(err)
			}
			mustRegister(b, f, benchRequest(i))
		}
		q := &registry.Query{CapabilityID: "orders.read", ServiceName: "svc-3"}
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var removals int
			for b.Loop() {
				ans := f.reg.Query(q)
				if ans.Complete || len(ans.Entries) != 100 {
					b.Fatalf("complete %v, %d entries; want an incomplete answer of 100", ans.Complete, len(ans.Entries))
				}
				removals = len(ans.Removed)
			}
			b.ReportMetric(float64(removals), "removals/answer")
		})
	}
}
