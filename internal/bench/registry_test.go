package bench_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/bench"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

func TestRunRegistry(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	// the registry runs in this process: its pid is ours, and the server CPU is measured
	rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 250, Concurrency: 4, Queries: 20, Changes: 5, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatalf("RunRegistry: %v", err)
	}
	want := map[string]int{"register": 250, "heartbeat": 250, "discovery": 20, "propagation": 5, "deregister": 245}
	var serverCPU time.Duration // /proc counts in 10 ms ticks: a short phase may show none, the run does
	for _, p := range rep.Phases {
		if p.Errors != 0 || p.Ops != want[p.Name] {
			t.Errorf("phase %s: %d ops, %d errors (%s), want %d ops", p.Name, p.Ops, p.Errors, p.FirstError, want[p.Name])
		}
		serverCPU += p.ServerCPU
		if p.Ops > 0 && (p.P50 <= 0 || p.P99 < p.P50 || p.Max < p.P99) {
			t.Errorf("phase %s: percentiles p50=%v p99=%v max=%v out of order", p.Name, p.P50, p.P99, p.Max)
		}
	}
	if serverCPU <= 0 {
		t.Error("no server CPU measured (--server-pid)")
	}
	if n, _ := s.Store.Counts(); n != 0 {
		t.Errorf("the run left %d instances registered", n)
	}
	var table bytes.Buffer
	if err := bench.WriteTable(&table, rep.Phases); err != nil || !strings.Contains(table.String(), "propagation") || !strings.Contains(table.String(), "server cpu/op") {
		t.Errorf("WriteTable = %q, %v", table.String(), err)
	}
}

func TestRunRegistryRefusesBadConfig(t *testing.T) {
	for _, cfg := range []bench.RegistryConfig{{URL: "ftp://x"}, {URL: "http://127.0.0.1:1", Instances: -1}} {
		if _, err := bench.RunRegistry(context.Background(), cfg); err == nil {
			t.Errorf("RunRegistry(%+v) succeeded", cfg)
		}
	}
}
