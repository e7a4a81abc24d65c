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

func TestRoutesDerive(t *testing.T) {
	out, err := run(context.Background(), "routes", "derive", "--case", filepath.Join("..", "..", "conformance", "cases", "static-wins.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Routes    []map[string]any `json:"routes"`
		Conflicts []map[string]any `json:"conflicts"`
		Requests  []map[string]any `json:"requests"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(got.Routes) != 2 || got.Routes[0]["source"] != "static" || len(got.Conflicts) != 1 || len(got.Requests) != 2 {
		t.Errorf("derive = %s", out)
	}

	// loose files: a manifest directory, a static file and a policy file
	dir := t.TempDir()
	mdir := filepath.Join(dir, "manifests")
	os.Mkdir(mdir, 0o755)
	os.WriteFile(filepath.Join(mdir, "a.json"), []byte(`{"generation": 1, "endpoint": "http://a:8080",
		"manifest": {"farp": "1.0", "service": {"name": "a", "instance": "a-1", "version": "1.0.0"},
		"routes": [{"path": "/a/{id}", "methods": ["GET"]}]}}`), 0o600)
	os.WriteFile(filepath.Join(dir, "static.yaml"), []byte("routes:\n  - {path: /healthz, methods: [GET], upstream: 'http://127.0.0.1:9000'}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("path_prefixes:\n  a: [/a]\n"), 0o600)
	out, err = run(context.Background(), "routes", "derive", "--manifests", mdir, "--static", filepath.Join(dir, "static.yaml"), "--policy", filepath.Join(dir, "policy.yaml"))
	if err != nil || !strings.Contains(out, `"pattern": "/a/{id}"`) || !strings.Contains(out, `"pattern": "/healthz"`) {
		t.Errorf("loose derive = %v\n%s", err, out)
	}

	for _, args := range [][]string{
		{"routes", "derive", "--case", filepath.Join(dir, "missing.json")},
		{"routes", "derive"},
		{"routes", "derive", "--manifests", mdir, "--static", filepath.Join(dir, "policy.yaml")},
	} {
		_, err := run(context.Background(), args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("meshflows %v = %v, want exit status 2", args, err)
		}
	}
}

func TestGatewayRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "static.yaml"), []byte("routes:\n  - {path: 'no-slash', methods: [GET], upstream: 'ftp://x'}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("path_prefixes: {a: [/a]}\n"), 0o600)
	for _, args := range [][]string{
		{"gateway", "--insecure", "--listen", "127.0.0.1:0", "--routes", filepath.Join(dir, "static.yaml")},
		{"gateway", "--insecure", "--listen", "127.0.0.1:0", "--policy", filepath.Join(dir, "p.yaml"), "--rbac", filepath.Join(dir, "p.yaml")},
		{"gateway", "--insecure", "--listen", "127.0.0.1:0", "--registry", "localhost:7400"},
	} {
		if _, err := run(context.Background(), args...); err == nil {
			t.Errorf("meshflows %v succeeded", args)
		}
	}
}

// TestRoutesDeriveIncrementalPrintsTheSameTable: every conformance case, derived through the
// incremental deriver with shuffled orders and churn, prints what the full derivation prints;
// --seed without --incremental is refused.
func TestRoutesDeriveIncrementalPrintsTheSameTable(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "conformance", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		full, err := run(context.Background(), "routes", "derive", "--case", f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, seed := range []string{"1", "2"} {
			inc, err := run(context.Background(), "routes", "derive", "--case", f, "--incremental", "--seed", seed, "--churn", "8")
			if err != nil {
				t.Fatalf("%s --incremental: %v", f, err)
			}
			if inc != full {
				t.Errorf("%s, seed %s: the incremental table differs:\n%s\nfull:\n%s", f, seed, inc, full)
			}
		}
	}
	if _, err := run(context.Background(), "routes", "derive", "--case", files[0], "--seed", "3"); err == nil {
		t.Error("--seed without --incremental was accepted")
	}
}
