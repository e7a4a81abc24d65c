package conformance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// TestCases runs every case file: the derived table, rejections, conflicts and request
// matches must equal the case's expectations.
func TestCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no case files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := routing.ParseCase(data)
			if err != nil {
				t.Fatal(err)
			}
			if c.Expect == nil {
				t.Fatal("the case has no expect")
			}
			out := c.Run()
			if diff := cmp.Diff(asJSON(t, *c.Expect), asJSON(t, out.Canonical)); diff != "" {
				t.Errorf("%s: table (-want +got):\n%s", c.Description, diff)
			}
			for i, r := range c.Requests {
				if r.Expect == nil {
					t.Errorf("request %d has no expect", i)
					continue
				}
				if diff := cmp.Diff(*r.Expect, out.Requests[i].Result); diff != "" {
					t.Errorf("%s %s (-want +got):\n%s", r.Method, r.Path, diff)
				}
			}
			// a pure function: the same inputs, byte for byte the same output
			a, _ := json.Marshal(c.Run())
			b, _ := json.Marshal(out)
			if string(a) != string(b) {
				t.Error("two derivations of the same case differ")
			}
			// and the same table from manifests decoded first, as a gateway holds them
			// (where replicas that publish one manifest are analysed once)
			decoded := *c
			decoded.Manifests = make([]routing.ManifestInput, len(c.Manifests))
			for i, m := range c.Manifests {
				decoded.Manifests[i] = m
				var man apiv1.Manifest
				if json.Unmarshal(m.Manifest, &man) == nil {
					decoded.Manifests[i].Parsed = &man
				}
			}
			if diff := cmp.Diff(asJSON(t, *c.Expect), asJSON(t, decoded.Run().Canonical)); diff != "" {
				t.Errorf("%s: table from decoded manifests (-want +got):\n%s", c.Description, diff)
			}
		})
	}
}

// asJSON is v as the wire sees it: the canonical JSON form, decoded generically.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
