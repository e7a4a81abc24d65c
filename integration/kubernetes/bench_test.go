package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshflows/meshflows/internal/kubesync"
)

// BenchmarkColdStartAndReadyFlip: 500 annotated Services of 20 endpoints each (10,000
// endpoints, one EndpointSlice per Service) in the API server before the syncer starts; it
// reports the time until all 10,000 are registered, the registry writes it issued, the heap
// the syncer holds for them (its informers' caches and its own state: the process also runs
// the API server and the registry, so its RSS would not tell), and then the time from one
// endpoint's ready flip written to the API server to the registry's revision that shows it
// (200 flips, 100 ms apart). Run it once:
//
//	cd integration/kubernetes && go test -run '^$' -bench ColdStart -benchtime 1x
func BenchmarkColdStartAndReadyFlip(b *testing.B) {
	const services, perService = 500, 20
	c := startCluster(b)
	m := startRegistry(b)
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("svc-%03d", i) }
	endpoints := func(i int, flip int) []endpoint {
		eps := make([]endpoint, perService)
		for j := range eps {
			eps[j] = ready(fmt.Sprintf("%s-%02d", name(i), j))
			if j == 0 && flip%2 == 1 {
				eps[j] = notReady(eps[j].pod)
			}
		}
		return eps
	}
	// written in parallel: 1,000 objects
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, services)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				svc := orders(nil)
				svc.Name = name(i)
				if _, err := c.kube.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
					continue
				}
				if _, err := c.kube.DiscoveryV1().EndpointSlices("shop").Create(ctx, slice(name(i), name(i)+"-a", endpoints(i, 0)...), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range services {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	kube, err := kubesync.NewClient(c.config)
	if err != nil {
		b.Fatal(err)
	}
	promReg := prometheus.NewRegistry()
	metrics, err := kubesync.NewMetrics(promReg)
	if err != nil {
		b.Fatal(err)
	}
	s, err := kubesync.New(kubesync.Config{Kube: kube, Namespaces: []string{"shop"}, Registry: m.client(b, "kube-sync"), Identity: "kube-sync", Metrics: metrics})
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	start := time.Now()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	for len(m.reg.Catalog().Instances) < services*perService {
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("%d of %d registered after 5 minutes", len(m.reg.Catalog().Instances), services*perService)
		}
		time.Sleep(20 * time.Millisecond)
	}
	coldStart := time.Since(start)
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	writes := 0.0
	families, err := promReg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "meshflows_kubesync_registry_writes_total" {
			for _, mm := range f.GetMetric() {
				writes += mm.GetCounter().GetValue()
			}
		}
	}

	// one endpoint flips, 200 times, one Service after another, each after a quiet spell
	// (MESHFLOWS_FLIP_PAUSE=0 flips back to back: a burst, gathered per coalescing window)
	pause := 100 * time.Millisecond
	if v, ok := os.LookupEnv("MESHFLOWS_FLIP_PAUSE"); ok {
		if pause, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
	}
	var flips []time.Duration
	for n := 1; n <= 200; n++ {
		i := n % services
		id := "shop." + name(i) + "-00"
		want := "not_ready"
		if (n/services)%2 == 1 {
			want = "ok"
		}
		rev := m.reg.State().Revision
		begin := time.Now()
		sl := slice(name(i), name(i)+"-a", endpoints(i, 1+n/services)...)
		cur, err := c.kube.DiscoveryV1().EndpointSlices("shop").Get(ctx, sl.Name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sl.ResourceVersion = cur.ResourceVersion
		if _, err := c.kube.DiscoveryV1().EndpointSlices("shop").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			in, err := m.reg.Instance(id)
			if err == nil && in.Health == want && m.reg.State().Revision > rev {
				break
			}
			if time.Since(begin) > 10*time.Second {
				b.Fatalf("flip %d of %s to %s never reached the registry", n, id, want)
			}
			time.Sleep(200 * time.Microsecond)
		}
		flips = append(flips, time.Since(begin))
		time.Sleep(pause) // a quiet spell: each flip is one change, not a burst
	}
	slices.Sort(flips)
	q := func(p float64) float64 { return float64(flips[int(p*float64(len(flips)-1))].Microseconds()) / 1000 }
	b.ReportMetric(coldStart.Seconds(), "s-to-registered")
	b.ReportMetric(writes, "registry-writes")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "syncer-heap-MiB")
	b.ReportMetric(q(0.5), "flip-p50-ms")
	b.ReportMetric(q(0.99), "flip-p99-ms")
	b.ReportMetric(q(1), "flip-max-ms")
}
