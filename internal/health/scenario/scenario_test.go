package scenario_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/health/scenario"
)

// TestScenarios runs every scenario file in testdata/scenarios (the shared ones and ours)
// and compares each answer with its expectation.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s, err := scenario.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			answers, err := s.Answers()
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range s.Expect {
				want := map[string]any{}
				for k, v := range x {
					if k != "t" && k != "id" && k != "capability" && k != "zone" {
						want[k] = v
					}
				}
				if diff := cmp.Diff(normalize(t, want), normalize(t, answers[i])); diff != "" {
					t.Errorf("expect[%d] at %v (%v%v) (-want +got):\n%s", i, x["t"], x["id"], x["capability"], diff)
				}
			}
		})
	}
}

// normalize gives v the types encoding/json decodes to, so that answers compare with files.
func normalize(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func FuzzParseScenario(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "scenarios", "*.json"))
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte(`{"instances":[{"id":"a"}],"events":[{"t":"-1s","id":"a","kind":"probe"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := scenario.Parse(raw)
		if err != nil {
			return
		}
		if _, err := s.Answers(); err != nil {
			return // events the engine refuses (a bad health value) are errors, never panics
		}
	})
}
