package workflow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/workflow"
)

// TestAliasesExpand: anchors, aliases and merge keys stand for their values, not for the
// text "*" they were read as before.
func TestAliasesExpand(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		step      int
		set       map[string]any // the set step's entries
		request   string         // the service_call's request, as JSON
	}{
		{name: "an alias in a set step", step: 0,
			src: "name: a\ninvocation: {type: http}\nsteps:\n  - id: s\n    type: set\n    set: {a: &x {k: 1}, b: *x}\n",
			set: map[string]any{"a": map[string]any{"k": int64(1)}, "b": map[string]any{"k": int64(1)}}},
		{name: "a whole request by alias", step: 1,
			src: "name: a\ninvocation: {type: http}\nsteps:\n" +
				"  - {id: first, type: service_call, capability: {id: messaging.publish}, request: &req {destination: q, payload: {n: 1}}}\n" +
				"  - {id: second, type: service_call, capability: {id: messaging.publish}, request: *req}\n",
			request: `{"destination":"q","payload":{"n":1}}`},
		{name: "a merge key: the mapping's own keys win", step: 1,
			src: "name: a\ninvocation: {type: http}\nsteps:\n" +
				"  - {id: first, type: service_call, step_version: \"1.1\", capability: {id: messaging.publish}, request: &req {destination: q, headers: {h: v}}}\n" +
				"  - id: second\n    type: service_call\n    step_version: \"1.1\"\n    capability: {id: messaging.publish}\n    request:\n      <<: *req\n      destination: other\n",
			request: `{"destination":"other","headers":{"h":"v"}}`},
		{name: "merge of a list: the earlier one wins", step: 0,
			src: "name: a\ninvocation: {type: http}\nsteps:\n  - id: s\n    type: set\n    set:\n      base: &b {x: 1, y: 1}\n      more: &m {y: 2, z: 2}\n      all: {<<: [*b, *m]}\n",
			set: map[string]any{"base": map[string]any{"x": int64(1), "y": int64(1)}, "more": map[string]any{"y": int64(2), "z": int64(2)},
				"all": map[string]any{"x": int64(1), "y": int64(1), "z": int64(2)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, ds := workflow.Parse([]byte(tt.src))
			if workflow.HasErrors(ds) {
				t.Fatalf("diagnostics: %v", ds)
			}
			st := w.Steps[tt.step]
			if tt.set != nil {
				got := map[string]any{}
				for _, e := range st.Set {
					got[e.Key] = e.Value
				}
				if d := cmp.Diff(tt.set, got); d != "" {
					t.Errorf("set (-want +got):\n%s", d)
				}
			}
			if tt.request != "" {
				var want, got any
				json.Unmarshal([]byte(tt.request), &want)
				json.Unmarshal(st.Request, &got)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("request (-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestHostileAliases: a billion laughs within the alias count is refused for what it
// expands to, a key set twice is refused, and a diagnostic inside an aliased value points at
// the anchor's text.
func TestHostileAliases(t *testing.T) {
	laughs := "name: lol\nsteps: []\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i < 10; i++ {
		laughs += fmt.Sprintf("l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), ", "))
	}
	for _, tt := range []struct {
		name, src, code, path string
		line                  int
	}{
		{"a billion laughs in 81 aliases", laughs, workflow.CodeYAMLLimit, "", 0},
		{"a key set twice", "name: a\nsteps: []\nname: b\n", workflow.CodeYAMLSyntax, "", 3},
		{"an unclosed flow mapping on line 7", "name: a\ninvocation:\n  type: [http]\nsteps:\n  - id: s\n    type: service_call\n" +
			"    capability: {id: messaging.publish, provider: jms\n    request: {destination: d}\n", workflow.CodeYAMLSyntax, "", 7},
		{"an unclosed flow sequence on line 3", "name: a\nsteps: []\ninvocation: {type: [http}\n", workflow.CodeYAMLSyntax, "", 3},
		{"a bad capability by alias", "name: a\ninvocation: {type: http}\nsteps:\n" +
			"  - id: first\n    type: service_call\n    capability: &cap\n      id: Bad\n" +
			"  - {id: second, type: service_call, capability: *cap}\n", workflow.CodeInvalidCapabilityID, "steps[1].capability.id", 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ds := workflow.Parse([]byte(tt.src))
			for _, d := range ds {
				if d.Code == tt.code && (tt.line == 0 || d.Line == tt.line) && (tt.path == "" || d.Path == tt.path) {
					return
				}
			}
			t.Errorf("no %s at line %d (%s) among %v", tt.code, tt.line, tt.path, ds)
		})
	}
}

// BenchmarkParseWideMapping: validation is linear in a mapping's size (it was quadratic:
// 40,000 keys took 5.6 s).
func BenchmarkParseWideMapping(b *testing.B) {
	for _, n := range []int{10_000, 20_000, 40_000} {
		var src strings.Builder
		src.WriteString("name: wide\ninvocation: {type: http}\nsteps:\n  - id: s\n    type: set\n    set:\n")
		for i := range n {
			fmt.Fprintf(&src, "      k%d: %d\n", i, i)
		}
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, ds := workflow.Parse([]byte(src.String())); workflow.HasErrors(ds) {
					b.Fatal(ds)
				}
			}
		})
	}
}
