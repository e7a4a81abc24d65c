package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateCommand(t *testing.T) {
	dir := filepath.Join("..", "..", "internal", "workflow", "testdata", "workflows")
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "schedule.yaml")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"validate", good}, 0, ""},
		{[]string{"validate", good, bad}, 1, "schedule.yaml:4:13: error INVALID_VALUE: schedule"},
		{[]string{"validate", filepath.Join(dir, "nope.yaml")}, 2, ""},
		{[]string{"validate", "--strict", "--no-strict", good}, 2, ""},
		{[]string{"validate", "--format", "xml", good}, 2, ""},
		{[]string{"validate", "-o", "xml", good}, 2, "want one of text, json, yaml"},
		{[]string{"validate"}, 2, "requires at least 1 arg"},
		{[]string{"validate", "--no-such-flag", good}, 2, "unknown flag"},
		{[]string{"validate", "--require-registry", good}, 2, "--require-registry needs --registry"},
		{[]string{"validate", "--require-registry", "--registry", "http://127.0.0.1:1", good}, 2, "the registry is unreachable"},
		{[]string{"validate", "--registry", "http://127.0.0.1:1", good}, 0, "validating the contract layer only"},
		{[]string{"validate", "--format", "json", good}, 0, "Flag --format has been deprecated, use -o/--output"},
	}
	for _, tt := range tests {
		out, err := run(context.Background(), tt.args...)
		code := 0
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			code = -1
		}
		said := out // what the command wrote, and the error main prints
		if err != nil {
			said += err.Error()
		}
		if code != tt.code || !strings.Contains(said, tt.want) {
			t.Errorf("meshflows %v = status %d (%v)\n%s\nwant status %d containing %q", tt.args, code, err, out, tt.code, tt.want)
		}
	}
	out, _ := run(context.Background(), "validate", "-o", "json", good, bad)
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 2 || results[1]["contract_status"] != "failed" {
		t.Errorf("json output: %v\n%s", err, out)
	}
}

// TestValidateScopeDiagnostics: meshflows validate prints every scope diagnostic at the line
// and column the golden files of internal/workflow pin, and --scope-mode decides the mode of a
// workflow that names none.
func TestValidateScopeDiagnostics(t *testing.T) {
	dir := filepath.Join("..", "..", "internal", "workflow", "testdata", "workflows")
	for _, name := range []string{"scope-strict", "scope-legacy", "nesting"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".yaml")
			golden, err := os.ReadFile(filepath.Join(dir, name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(context.Background(), "validate", file)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 1 {
				t.Errorf("exit = %v, want status 1", err)
			}
			got := strings.ReplaceAll(out, dir+string(filepath.Separator), "")
			if got != string(golden) {
				t.Errorf("meshflows validate %s:\n%s\nwant (the golden file):\n%s", file, got, golden)
			}
		})
	}
	// a workflow without scope: legacy by default, strict with --scope-mode strict
	src := filepath.Join(t.TempDir(), "noscope.yaml")
	os.WriteFile(src, []byte("name: noscope\ninvocation: {type: http}\nsteps:\n  - id: each\n    type: loop\n    for_each: [1]\n    steps:\n"+
		"      - {id: s, type: set, set: {k: 1}}\n  - {id: after, type: set, set: {v: \"${context.k}\"}}\n"), 0o600)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"validate", src}, 0, "warning SCOPE_LEAK"},
		{[]string{"validate", "--scope-mode", "strict", src}, 1, "error SCOPE_LEAK"},
		{[]string{"validate", "--scope-mode", "sideways", src}, 2, ""},
	} {
		out, err := run(context.Background(), tt.args...)
		code := 0
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		said := out // what the command wrote, and the error main prints
		if err != nil {
			said += err.Error()
		}
		if code != tt.code || !strings.Contains(said, tt.want) {
			t.Errorf("meshflows %v = %d\n%s\nwant %d with %q", tt.args, code, out, tt.code, tt.want)
		}
	}
}
