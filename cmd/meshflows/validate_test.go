package main

import (
	"context"
	"encoding/json"
	"errors"
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
		if code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("meshflows %v = status %d (%v)\n%s\nwant status %d containing %q", tt.args, code, err, out, tt.code, tt.want)
		}
	}
	out, _ := run(context.Background(), "validate", "--format", "json", good, bad)
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil || len(results) != 2 || results[1]["contract_status"] != "failed" {
		t.Errorf("json output: %v\n%s", err, out)
	}
}
