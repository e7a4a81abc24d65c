package workflow_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/workflow"
)

// nestedYAML is a strict workflow of at least n steps: loops of parallel steps of loops (3
// levels deep) around service_call and set steps, 16 steps a round.
func nestedYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("name: nested\nscope: strict\ninvocation: {type: http}\nsteps:\n")
	id := 0
	next := func() string { id++; return fmt.Sprintf("s%d", id) }
	for steps := 0; steps < n; steps += 16 {
		fmt.Fprintf(&b, "  - id: %s\n    type: loop\n    for_each: \"${input.items}\"\n    export_context_keys: [last]\n    steps:\n", next())
		fmt.Fprintf(&b, "      - id: %s\n        type: parallel\n        branches:\n", next())
		for range 2 {
			fmt.Fprintf(&b, "          - id: %s\n            steps:\n", next())
			fmt.Fprintf(&b, "              - id: %s\n                type: loop\n                for_each: [1, 2]\n                steps:\n", next())
			for range 3 {
				fmt.Fprintf(&b, "                  - {id: %s, type: service_call, capability: {id: messaging.publish}, request: {destination: d, payload: \"${loop.item}\"}, output: last}\n", next())
				fmt.Fprintf(&b, "                  - {id: %s, type: set, set: {n: \"${loop.index}\"}}\n", next())
			}
		}
		fmt.Fprintf(&b, "        outputs_map:\n          last: {key: last, aggregate: last}\n")
	}
	return []byte(b.String())
}

// BenchmarkContractNested: contract validation (parse, structure, scope analysis) of a
// 500-step strict workflow nested 3 deep. Target: at most 20 ms, 40 µs a step.
func BenchmarkContractNested(b *testing.B) {
	src := nestedYAML(500)
	w, ds := workflow.Parse(src)
	if len(ds) > 0 || len(w.All()) < 500 {
		b.Fatalf("%d steps, diagnostics %v", len(w.All()), ds)
	}
	b.ReportAllocs()
	for b.Loop() {
		workflow.Parse(src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(w.All())), "ns/step")
}

// BenchmarkStrictSnapshot: the deep copy a strict iteration or branch starts with, of a
// context of about 1 MiB. Target: at most 2 ms.
func BenchmarkStrictSnapshot(b *testing.B) {
	sc := workflow.NewScope(workflow.ModeStrict, nil)
	for i := range 1000 {
		item := map[string]any{"id": float64(i), "name": strings.Repeat("x", 900), "tags": []any{"a", "b"}}
		sc.Set(fmt.Sprintf("k%d", i), item)
	}
	b.ReportAllocs()
	for b.Loop() {
		sc.Branch()
	}
}

func FuzzParseRefs(f *testing.F) {
	for _, s := range []string{"${input}", "a ${context.k.x} b", "${steps.a.output.0}", "${loop.item}", "${loop.index}", "${", "${}", "$${x}", "${context.K}", "${steps.a}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		refs, whole, err := workflow.ParseRefs(s)
		if err != nil {
			return
		}
		if whole && len(refs) != 1 {
			t.Fatalf("%q is whole with %d references", s, len(refs))
		}
		for _, r := range refs {
			if r.Root == "" || strings.ContainsAny(r.Text, "{}") {
				t.Fatalf("%q gave %+v", s, r)
			}
		}
	})
}

// FuzzParseNested feeds the nested-step decoder: whatever it gets, it answers with
// positioned diagnostics and never panics.
func FuzzParseNested(f *testing.F) {
	f.Add(nestedYAML(20))
	f.Add([]byte("name: x\nscope: strict\ninvocation: {type: http}\nsteps:\n  - {id: a, type: loop, for_each: [1], steps: [{id: b, type: parallel, branches: [{id: c, steps: [{id: d, type: set, set: {k: 1}}]}]}]}\n"))
	f.Add([]byte("name: x\ninvocation: {type: http}\nsteps: [{id: a, type: parallel, outputs_map: {k: {branch: z}}, branches: 3}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, mode := range []workflow.Mode{workflow.ModeLegacy, workflow.ModeStrict} {
			w, ds := workflow.ParseWith(src, mode)
			if w == nil {
				t.Fatal("no workflow")
			}
			for _, d := range ds {
				if d.Code == "" || d.Line < 1 || d.Column < 1 {
					t.Fatalf("diagnostic without code or position: %+v", d)
				}
			}
		}
	})
}

// TestHugeAndHostileWorkflows: a list of 10,000 steps and an alias bomb are refused with a
// diagnostic at once.
func TestHugeAndHostileWorkflows(t *testing.T) {
	var big strings.Builder
	big.WriteString("name: big\ninvocation: {type: http}\nsteps:\n")
	for i := range 10000 {
		fmt.Fprintf(&big, "  - {id: s%d, type: set, set: {k: %d}}\n", i, i)
	}
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	for i := range 120 {
		bomb += fmt.Sprintf("b%d: &b%d [*a, *a, *a, *a, *a, *a, *a, *a]\n", i, i)
	}
	for _, tt := range []struct {
		name, src, code string
	}{
		{"10,000 steps", big.String(), workflow.CodeInvalidValue},
		{"alias bomb", bomb, workflow.CodeYAMLLimit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ds := workflow.Parse([]byte(tt.src))
			found := false
			for _, d := range ds {
				found = found || d.Code == tt.code
			}
			if !found {
				t.Errorf("no %s among %d diagnostics", tt.code, len(ds))
			}
		})
	}
}

// TestApplyOutputsAggregates: what a strict parent receives from its branches, by entry.
func TestApplyOutputsAggregates(t *testing.T) {
	parent := workflow.NewScope(workflow.ModeStrict, nil)
	branches := []workflow.Branch{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	scopes := []*workflow.Scope{parent.Branch(), parent.Branch(), parent.Branch()}
	scopes[0].Set("id", "a-1")
	scopes[0].Set("obj", map[string]any{"x": 1.0, "y": 1.0})
	scopes[2].Set("id", "c-1")
	scopes[2].Set("obj", map[string]any{"y": 2.0})
	workflow.ApplyOutputs(parent, []workflow.OutputEntry{
		{Key: "from_c", Branch: "c", From: "id"},
		{Key: "from_b", Branch: "b", From: "id"}, // b never set it: left unset
		{Key: "all", From: "id", Aggregate: workflow.AggregateCollect},
		{Key: "first", From: "id", Aggregate: workflow.AggregateFirst},
		{Key: "last", From: "id", Aggregate: workflow.AggregateLast},
		{Key: "merged", From: "obj", Aggregate: workflow.AggregateMerge},
		{Key: "none", From: "missing", Aggregate: workflow.AggregateCollect},
	}, branches, scopes, false)
	want := map[string]any{"from_c": "c-1", "all": []any{"a-1", "c-1"}, "first": "a-1", "last": "c-1",
		"merged": map[string]any{"x": 1.0, "y": 2.0}}
	if diff := cmp.Diff(want, parent.Context()); diff != "" {
		t.Errorf("parent context (-want +got):\n%s", diff)
	}
}
