package bench_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshflows/meshflows/internal/bench"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

// checkPhases checks a run's phases: every operation done, none failed, percentiles in order.
func checkPhases(t *testing.T, who string, phases []bench.Phase) {
	t.Helper()
	want := map[string]int{"register": 250, "heartbeat": 250, "discovery": 20, "propagation": 5, "deregister": 245}
	for _, p := range phases {
		if p.Errors != 0 || p.Ops != want[p.Name] {
			t.Errorf("%s phase %s: %d ops, %d errors (%s), want %d ops", who, p.Name, p.Ops, p.Errors, p.FirstError, want[p.Name])
		}
		if p.Ops > 0 && (p.P50 <= 0 || p.P99 < p.P50 || p.Max < p.P99) {
			t.Errorf("%s phase %s: percentiles p50=%v p99=%v max=%v out of order", who, p.Name, p.P50, p.P99, p.Max)
		}
	}
	if len(phases) != len(want) {
		t.Errorf("%s: %d phases, want %d", who, len(phases), len(want))
	}
}

func TestRunRegistry(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	// the registry runs in this process: its pid is ours, and the server CPU is measured
	rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 250, Concurrency: 4, Queries: 20, Changes: 5, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatalf("RunRegistry: %v", err)
	}
	checkPhases(t, "registry", rep.Phases)
	var serverCPU time.Duration // /proc counts in 10 ms ticks: a short phase may show none, the run does
	for _, p := range rep.Phases {
		serverCPU += p.ServerCPU
	}
	if serverCPU <= 0 {
		t.Error("no server CPU measured (--server-pid)")
	}
	for _, p := range rep.Phases {
		if p.ServerRSS <= 0 || p.ServerPeakRSS < p.ServerRSS {
			t.Errorf("%s: server RSS %d, peak %d: want 0 < RSS <= peak (--server-pid)", p.Name, p.ServerRSS, p.ServerPeakRSS)
		}
	}
	if rep.Etcd != nil {
		t.Errorf("an etcd report without etcd endpoints: %+v", rep.Etcd)
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings on a quick run: %q", rep.Warnings)
	}
	if n, _ := s.Store.Counts(); n != 0 {
		t.Errorf("the run left %d instances registered", n)
	}
	var table bytes.Buffer
	if err := bench.WriteTable(&table, rep.Phases); err != nil || !strings.Contains(table.String(), "propagation") || !strings.Contains(table.String(), "server cpu/op") || !strings.Contains(table.String(), "peak rss") {
		t.Errorf("WriteTable = %q, %v", table.String(), err)
	}
}

// TestRunRegistryAgainstEtcd runs the same workload against the registry and a real etcd
// (in this process) in one run, and leaves neither holding anything.
func TestRunRegistryAgainstEtcd(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	etcd := etcdtest.Start(t)
	rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 250, Concurrency: 4, Queries: 20, Changes: 5,
		EtcdEndpoints: []string{etcd.Endpoint}, EtcdPrefix: "/bench-test/"})
	if err != nil {
		t.Fatalf("RunRegistry: %v", err)
	}
	checkPhases(t, "registry", rep.Phases)
	if rep.Etcd == nil {
		t.Fatal("no etcd report")
	}
	checkPhases(t, "etcd", rep.Etcd.Phases)
	left, err := etcd.Client.Get(context.Background(), "/bench-test/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || left.Count != 0 {
		t.Errorf("etcd holds %v keys after the run (%v)", left, err)
	}
	var out bytes.Buffer
	if err := bench.WriteComparison(&out, rep); err != nil || !strings.Contains(out.String(), "registry/etcd") {
		t.Errorf("WriteComparison = %q, %v", out.String(), err)
	}
}

func TestRunRegistryRefusesBadConfig(t *testing.T) {
	for _, cfg := range []bench.RegistryConfig{{URL: "ftp://x"}, {URL: "http://127.0.0.1:1", Instances: -1},
		{URL: "http://127.0.0.1:1", EtcdEndpoints: []string{"127.0.0.1:2379"}}, {URL: "http://127.0.0.1:1", EtcdEndpoints: []string{"http://127.0.0.1:2379"}, EtcdTTL: time.Millisecond},
		{URL: "http://127.0.0.1:1", ServerPID: 1 << 30}, {URL: "http://127.0.0.1:1", ServerPID: -1}, {URL: "http://127.0.0.1:1", EtcdPID: 1 << 30}} {
		if _, err := bench.RunRegistry(context.Background(), cfg); err == nil {
			t.Errorf("RunRegistry(%+v) succeeded", cfg)
		}
	}
}
