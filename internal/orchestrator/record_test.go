package orchestrator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/orchestrator"
)

// nestedLoops is a workflow of two nested loops over the input's items, each inner
// iteration a set step that reads its item's x.
const nestedLoops = "name: nested\ninvocation: {type: http}\nsteps:\n" +
	"  - id: outer\n    type: loop\n    for_each: \"${input.items}\"\n    max_iterations: 1000\n    steps:\n" +
	"      - id: inner\n        type: loop\n        for_each: \"${input.items}\"\n        max_iterations: 1000\n        steps:\n" +
	"          - {id: note, type: set, set: {x: \"${loop.item.x}\"}}\n"

func itemsInput(n, without int) json.RawMessage {
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"x": i}
		if i == without {
			items[i] = map[string]any{}
		}
	}
	b, _ := json.Marshal(map[string]any{"items": items})
	return b
}

func recordOrchestrator(t testing.TB, cfg orchestrator.Config) *orchestrator.Orchestrator {
	t.Helper()
	cfg.Discovery, _ = discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	o, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := o.Upload(context.Background(), []byte(nestedLoops)); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(r))
	}
	if _, err := o.Publish("nested"); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestRunRecordIsBounded: 40,000 iterations in two nested loops make a record under the
// bound that says what it left out, keeps the first and the last iterations and the one
// that failed.
func TestRunRecordIsBounded(t *testing.T) {
	for _, tt := range []struct {
		name    string
		without int // the item without x, whose inner iteration fails (-1: none)
		bound   int
	}{{"all succeed", -1, 64 << 10}, {"the iteration of item 150 fails", 150, 8 << 10}} {
		t.Run(tt.name, func(t *testing.T) {
			bound := tt.bound
			o := recordOrchestrator(t, orchestrator.Config{MaxRunRecordBytes: bound})
			run, err := o.RunNow(context.Background(), "nested", "http", itemsInput(200, tt.without))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(run)
			if len(b) > bound*3/2 || !run.Truncated {
				t.Fatalf("record = %d bytes (bound %d), truncated %v", len(b), bound, run.Truncated)
			}
			outer := run.Steps[0]
			last := outer.Iterations[len(outer.Iterations)-1]
			wantTotal := 200
			if tt.without >= 0 {
				wantTotal = 1 // the first outer iteration meets item 150 in its inner loop
			}
			if outer.IterationsTotal != wantTotal || outer.Iterations[0].Index != 0 || last.Index != wantTotal-1 {
				t.Errorf("outer: total %d, omitted %d, kept %d (first %d, last %d)", outer.IterationsTotal, outer.IterationsOmitted,
					len(outer.Iterations), outer.Iterations[0].Index, last.Index)
			}
			inner := last.Steps[0]
			innerLast := inner.Iterations[len(inner.Iterations)-1]
			switch {
			case tt.without < 0 && (run.Status != apiv1.RunSucceeded || inner.IterationsTotal != 200 || inner.IterationsOmitted == 0 || innerLast.Index != 199):
				t.Errorf("inner loop of the last outer iteration: %s, total %d, omitted %d, last %d", run.Status, inner.IterationsTotal, inner.IterationsOmitted, innerLast.Index)
			case tt.without >= 0 && (run.Status != apiv1.RunFailed || innerLast.Index != tt.without || innerLast.Status != apiv1.RunFailed):
				t.Errorf("the failed iteration is not kept: %s, last inner iteration %d %s", run.Status, innerLast.Index, innerLast.Status)
			}
		})
	}
}

// TestRunHistoryIsBoundedAndKeptARunAFile: the history keeps what fits in its byte bound,
// and Dir holds a file per kept run (those that left are removed) beside a small index.
func TestRunHistoryIsBoundedAndKeptARunAFile(t *testing.T) {
	dir := t.TempDir()
	o := recordOrchestrator(t, orchestrator.Config{Dir: dir, MaxRunHistoryBytes: 16 << 10})
	for range 30 {
		if _, err := o.RunNow(context.Background(), "nested", "http", itemsInput(3, -1)); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := o.Runs("nested")
	var total int
	for _, r := range h.Runs {
		b, _ := json.Marshal(r)
		total += len(b)
	}
	if len(h.Runs) == 0 || len(h.Runs) >= 30 || total > 16<<10 {
		t.Fatalf("history: %d runs, %d bytes (bound %d)", len(h.Runs), total, 16<<10)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "nested.runs", "*.json"))
	if len(files) != len(h.Runs) {
		t.Errorf("%d run files for %d runs in the history", len(files), len(h.Runs))
	}
	if fi, err := os.Stat(filepath.Join(dir, "nested.runs.json")); err != nil || fi.Size() > 4<<10 {
		t.Errorf("the history index: %v, %d bytes", err, fi.Size())
	}
	// a restart reads the same history back
	o2 := recordOrchestrator(t, orchestrator.Config{Dir: dir, MaxRunHistoryBytes: 16 << 10})
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	h2, _ := o2.Runs("nested")
	if len(h2.Runs) != len(h.Runs) || h2.Runs[0].RunID != h.Runs[0].RunID {
		t.Errorf("after a restart %d runs (newest %s), before %d (newest %s)", len(h2.Runs), h2.Runs[0].RunID, len(h.Runs), h.Runs[0].RunID)
	}
	if err := o2.Delete("nested"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nested.runs")); !os.IsNotExist(err) {
		t.Errorf("the runs directory after DELETE: %v", err)
	}
}

// TestOldRunHistoryIsRead: a history in the single file of earlier versions is read and
// written a run a file.
func TestOldRunHistoryIsRead(t *testing.T) {
	dir := t.TempDir()
	o := recordOrchestrator(t, orchestrator.Config{Dir: dir})
	run, err := o.RunNow(context.Background(), "nested", "http", itemsInput(2, -1))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]any{"runs": []*apiv1.Run{run}, "slices": []any{}})
	os.RemoveAll(filepath.Join(dir, "nested.runs"))
	os.WriteFile(filepath.Join(dir, "nested.runs.json"), old, 0o644)
	o2 := recordOrchestrator(t, orchestrator.Config{Dir: dir})
	if err := o2.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h, _ := o2.Runs("nested"); len(h.Runs) != 1 || h.Runs[0].RunID != run.RunID {
		t.Fatalf("history from the old file = %+v", h.Runs)
	}
	if _, err := os.Stat(filepath.Join(dir, "nested.runs", run.RunID+".json")); err != nil {
		t.Errorf("the old history was not written a run a file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "nested.runs.json")); strings.Contains(string(b), `"runs"`) {
		t.Errorf("the index still holds the runs: %s", b)
	}
}

// BenchmarkMillionIterations: two nested loops of 1,000 over 1,000 set steps (the run that
// made a 117 MB record), with the default bounds. It reports the heap's peak above the
// heap before the run (sampled every 10 ms) and the heap left once the workflow is deleted.
func BenchmarkMillionIterations(b *testing.B) {
	input := itemsInput(1000, -1)
	for b.Loop() {
		b.StopTimer()
		o := recordOrchestrator(b, orchestrator.Config{})
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := procStatus("VmRSS:")
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapAlloc > peak.Load() {
						peak.Store(m.HeapAlloc)
					}
				}
			}
		})
		b.StartTimer()
		run, err := o.RunNow(context.Background(), "nested", "http", input)
		b.StopTimer()
		close(stop)
		wg.Wait()
		if err != nil || run.Status != apiv1.RunSucceeded {
			b.Fatal(err, run.Status)
		}
		enc, _ := json.Marshal(run)
		recordKiB := float64(len(enc)) / (1 << 10)
		o.Delete("nested")
		run, enc = nil, nil
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(peak.Load()-min(peak.Load(), before.HeapAlloc))/(1<<20), "peak-heap-MiB")
		b.ReportMetric(recordKiB, "record-KiB")
		if hwm := procStatus("VmHWM:"); hwm > 0 && rssBefore > 0 {
			b.ReportMetric(float64(hwm-rssBefore)/(1<<10), "peak-RSS-above-before-MiB") // meaningful when run alone
		}
		b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), "heap-after-delete-MiB")
		b.StartTimer()
	}
}

// TestRunOutput: a run's output is its last step's (a loop's or parallel step's being the
// keys it hands back), or the workflow's declared output.
func TestRunOutput(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       string
	}{
		{"the last of two set steps", "steps:\n  - {id: a, type: set, set: {x: 1}}\n  - {id: b, type: set, set: {y: 2}}\n", `{"y":2}`},
		{"a loop last: what it exports, not the first step's output",
			"steps:\n  - {id: start, type: set, set: {n: 0}}\n  - id: each\n    type: loop\n    for_each: \"${input.items}\"\n    export_context_keys: [last]\n" +
				"    steps:\n      - {id: note, type: set, set: {last: \"${loop.item}\"}}\n", `{"last":3}`},
		{"a parallel step last: its outputs_map",
			"steps:\n  - {id: start, type: set, set: {n: 0}}\n  - id: fan\n    type: parallel\n    branches:\n" +
				"      - {id: a, steps: [{id: sa, type: set, set: {v: 1}}]}\n      - {id: b, steps: [{id: sb, type: set, set: {v: 2}}]}\n" +
				"    outputs_map:\n      vs: {key: v, aggregate: collect}\n", `{"vs":[1,2]}`},
		{"a declared output", "output: {first: \"${context.x}\", items: \"${input.items}\"}\nsteps:\n  - {id: a, type: set, set: {x: 1}}\n  - {id: b, type: set, set: {y: 2}}\n",
			`{"first":1,"items":[1,2,3]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			disc, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
			o, err := orchestrator.New(orchestrator.Config{Discovery: disc, MaxParallel: 1})
			if err != nil {
				t.Fatal(err)
			}
			src := "name: out\ninvocation: {type: http}\nscope: strict\n" + tt.body
			if r, err := o.Upload(context.Background(), []byte(src)); err != nil {
				t.Fatalf("%v\n%s", err, diagnostics(r))
			}
			o.Publish("out")
			run, err := o.RunNow(context.Background(), "out", "http", json.RawMessage(`{"items": [1, 2, 3]}`))
			if err != nil || run.Status != apiv1.RunSucceeded {
				t.Fatalf("run: %v %+v", err, run)
			}
			if string(run.Output) != tt.want {
				t.Errorf("output = %s, want %s", run.Output, tt.want)
			}
		})
	}
}

// procStatus reads a kB figure of /proc/self/status (0 where there is none).
func procStatus(field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}
