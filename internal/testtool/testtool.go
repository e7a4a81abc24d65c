// Package testtool finds the programs some tests run (Chromium, Prometheus, Python, dig,
// curl, jq): a test whose program is missing is skipped on a developer's machine and fails
// in CI (CI=true), where .ci/run installs every one of them, so that a missing tool never
// turns a suite green by skipping it.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Need returns the path of the first of names found on PATH (or given as an absolute path),
// or ends the test: skipped outside CI, failed in CI. install says how to get it.
func Need(t testing.TB, install string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if InCI() {
		t.Fatalf("%v is not installed, and CI=true: a test that needs it must not be skipped in CI (%s)", names, install)
	}
	t.Skipf("%v is not installed (%s): skipped outside CI", names, install)
	return ""
}
