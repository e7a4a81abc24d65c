package workflow_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/workflow"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestContractGolden checks every workflow of testdata/workflows against its golden
// diagnostics (testdata/workflows/NAME.golden, the text format of 'meshflows validate').
func TestContractGolden(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "workflows", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no workflows in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, ds := workflow.Parse(src)
			var b strings.Builder
			workflow.WriteText(&b, filepath.Base(f), ds)
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				os.WriteFile(golden, []byte(b.String()), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("diagnostics (-golden +got):\n%s", diff)
			}

			// the JSON result object, contract layer only, at a fixed time
			_, res := workflow.Validate(context.Background(), src, workflow.Options{Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }})
			got, _ := json.MarshalIndent(res, "", "  ")
			jgolden := strings.TrimSuffix(f, ".yaml") + ".json.golden"
			if *update {
				os.WriteFile(jgolden, append(got, '\n'), 0o644)
			}
			jwant, err := os.ReadFile(jgolden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(jwant), string(got)+"\n"); diff != "" {
				t.Errorf("JSON result (-golden +got):\n%s", diff)
			}
		})
	}
}
