package workflow_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		})
	}
}
