package statefile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshflows/meshflows/internal/statefile"
)

func TestWriteJSONReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	for _, v := range []map[string]int{{"a": 1}, {"b": 2}} {
		if err := statefile.WriteJSON(path, v); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]int
		if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 {
			t.Fatalf("read back %s: %v", raw, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := statefile.WriteJSON(path, func() {}); err == nil {
		t.Error("a value JSON cannot encode was written")
	}
}
