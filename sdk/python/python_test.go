// Package python_test runs the Python SDK's unittest suites under 'go test ./...', against
// the real meshflows binary it builds first.
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonSDK builds meshflows, then runs 'python3 -m unittest' on sdk/python/tests with
// $MESHFLOWS_BIN pointing at it; a failure prints the Python output. It is skipped, saying
// so, only when python3 is absent.
func TestPythonSDK(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python SDK's suites are skipped")
	}
	bin := filepath.Join(t.TempDir(), "meshflows")
	build := exec.Command("go", "build", "-o", bin, "github.com/meshflows/meshflows/cmd/meshflows")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", "tests", "-v")
	cmd.Env = append(os.Environ(), "MESHFLOWS_BIN="+bin, "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestPipInstallOffline: 'pip install --no-build-isolation ./sdk/python' works with no
// network (the in-tree build backend needs only the standard library), and the installed
// package imports the public API. Skipped when python3 has no pip.
func TestPipInstallOffline(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	if err := exec.Command(py, "-m", "pip", "--version").Run(); err != nil {
		t.Skip("python3 has no pip")
	}
	target := t.TempDir()
	install := exec.Command(py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "--target", target, ".")
	install.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	imp := exec.Command(py, "-c", "import meshflows, sys; from meshflows import Agent, Capability, DiscoveryClient, ProviderServer, RegistryUnavailable; print(meshflows.__file__)")
	imp.Dir = t.TempDir() // not the source tree
	imp.Env = append(os.Environ(), "PYTHONPATH="+target, "PYTHONDONTWRITEBYTECODE=1")
	out, err := imp.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), target) {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
}
