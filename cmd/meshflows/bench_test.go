package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestBenchRegistryFloor runs 'bench registry --floor': the floor servers are this program
// started again ('bench floor-server'), and the report ends with the comparison.
func TestBenchRegistryFloor(t *testing.T) {
	t.Setenv(asMeshflows, "1") // the floor servers: this test binary, run as meshflows
	s := registrytest.NewServer(t, registry.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := run(ctx, "bench", "registry", "--registry", s.URL, "--instances", "200", "--concurrency", "4", "--queries", "20",
		"--changes", "5", "--floor", "--server-pid", strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatalf("bench registry --floor: %v\n%s", err, out)
	}
	for _, want := range []string{"floor: a net/http handler that reads the request and writes the answer", "floor: a minimal HTTP/1.1 responder on raw TCP",
		"registry/net/http", "heartbeat"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	tables := 0
	for line := range strings.Lines(out) {
		f := strings.Fields(line) // a phase table's row: phase, ops, errors, ...
		if len(f) < 4 || f[0] != "heartbeat" {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // the comparison's row
		}
		tables++
		if f[2] != "0" {
			t.Errorf("heartbeat errors: %s", line)
		}
	}
	if tables != 3 {
		t.Errorf("%d tables with a heartbeat phase, want 3 (the registry's and two floors'):\n%s", tables, out)
	}
}

// TestBenchOutliersPrintsTheFigures: one seed and a short false-ejection run print the three
// tables; the engine catches the 4 % replica with five reporters at 50 req/s.
func TestBenchOutliersPrintsTheFigures(t *testing.T) {
	out, err := run(context.Background(), "bench", "outliers", "--seeds", "1", "--hours", "0.1")
	if err != nil {
		t.Fatalf("bench outliers: %v\n%s", err, out)
	}
	for _, want := range []string{"| 50 | 5 | 10 / 10 s |", "False ejections per instance-hour", "| 3 | 100 % |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := run(context.Background(), "bench", "outliers", "--seeds", "0"); err == nil {
		t.Error("--seeds 0 was accepted")
	}
}

// TestBenchRoutesComparesBothDerivations: a small fleet, both derivers timed, their final
// tables equal, the JSON keys the performance docs quote.
func TestBenchRoutesComparesBothDerivations(t *testing.T) {
	out, err := run(context.Background(), "bench", "routes", "--services", "50", "--instances", "3", "--changes", "40", "-o", "json")
	if err != nil {
		t.Fatalf("bench routes: %v\n%s", err, out)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep["tables_equal"] != true || rep["full_ns_per_change"].(float64) <= 0 || rep["incremental_ns_per_change"].(float64) <= 0 {
		t.Errorf("report = %s", out)
	}
}
