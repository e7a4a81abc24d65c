package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEligibilitySimulate(t *testing.T) {
	file := filepath.Join("..", "..", "internal", "health", "scenario", "testdata", "scenarios", "panic-below-half.json")
	out, err := run(context.Background(), "eligibility", "simulate", "--scenario", file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Answers []map[string]any `json:"answers"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	want := map[string]any{"panic": true, "instances": []any{"a", "b", "c", "d"}}
	if len(got.Answers) != 5 {
		t.Fatalf("%d answers, want 5:\n%s", len(got.Answers), out)
	}
	if diff := cmp.Diff(want, got.Answers[3]); diff != "" {
		t.Errorf("answer 3 (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	unsupported := filepath.Join(dir, "unknown-setting.json")
	os.WriteFile(unsupported, []byte(`{"name":"f","config":{"warp_speed":9},"instances":[],"events":[],"expect":[]}`), 0o600)
	for _, tc := range []struct{ name, file string }{
		{"missing file", filepath.Join(dir, "nothing.json")},
		{"unknown setting", unsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(context.Background(), "eligibility", "simulate", "--scenario", tc.file)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Errorf("simulate %s = %v, want exit status 2", tc.file, err)
			}
		})
	}
}
