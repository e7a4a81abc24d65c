// Package python_test runs the Python SDK's unittest suites under 'go test ./...', against
// the real meshflows binary it builds first.
package python_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/testtool"
)

// TestPythonSDK builds meshflows, then runs 'python3 -m unittest' on sdk/python/tests with
// $MESHFLOWS_BIN pointing at it and $MESHFLOWS_TEST_PORTS naming a block of ports from
// freeport for the servers the suites start (the harness hands them out in turn); a failure
// prints the Python output. It is skipped, saying so, only when python3 is absent.
func TestPythonSDK(t *testing.T) {
	py := testtool.Need(t, "apt-get install python3", "python3")
	bin := filepath.Join(t.TempDir(), "meshflows")
	build := exec.Command("go", "build", "-o", bin, "github.com/meshflows/meshflows/cmd/meshflows")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", "tests", "-v")
	const ports = 48 // the suites start about twenty servers
	first := freeport.Block(t, ports)
	cmd.Env = append(os.Environ(), "MESHFLOWS_BIN="+bin, "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1",
		fmt.Sprintf("MESHFLOWS_TEST_PORTS=%d-%d", first, first+ports-1))
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
	py := testtool.Need(t, "apt-get install python3", "python3")
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

// TestTutorialPython runs the Python path of docs/provider-tutorial.md: meshflows dev, the
// example webhook provider on the SDK, and a request through the gateway to it; then the
// provider stops and deregisters.
func TestTutorialPython(t *testing.T) {
	py := testtool.Need(t, "apt-get install python3", "python3")
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshflows")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshflows/meshflows/cmd/meshflows").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := freeport.Block(t, 12) // meshflows dev's port plan
	dev := exec.Command(bin, "dev", "--base-port", strconv.Itoa(base))
	var devOut strings.Builder
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Process.Signal(os.Interrupt); dev.Wait() })
	registry := "http://127.0.0.1:" + strconv.Itoa(base)
	gateway := "http://127.0.0.1:" + strconv.Itoa(base+2)
	registrytest.Until(t, "meshflows dev answers", func() bool { return get(registry+"/healthz") == 200 })

	port := freeport.Port(t)
	wh := exec.Command(py, filepath.Join("..", "..", "examples", "providers", "webhook-python", "webhook.py"),
		"--registry", registry, "--listen", "127.0.0.1:"+strconv.Itoa(port))
	wh.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var whOut strings.Builder
	wh.Stdout, wh.Stderr = &whOut, &whOut
	if err := wh.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			wh.Process.Kill()
			wh.Wait()
		}
	})
	var answer string
	registrytest.Until(t, "the gateway routes POST /api/webhook/send to the Python provider", func() bool {
		resp, err := http.Post(gateway+"/api/webhook/send", "application/json", strings.NewReader(`{"url":"https://example.test/hook","payload":{"id":1}}`))
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer = string(b)
		return resp.StatusCode == 200
	})
	if !strings.Contains(answer, `"delivered":true`) {
		t.Errorf("answer through the gateway: %s", answer)
	}
	wh.Process.Signal(os.Interrupt)
	if err := wh.Wait(); err != nil {
		t.Errorf("the provider did not stop cleanly: %v\n%s", err, whOut.String())
	}
	stopped = true
	if !strings.Contains(whOut.String(), "stopped") {
		t.Errorf("provider output:\n%s", whOut.String())
	}
	instance := "egress-webhook-" + strconv.Itoa(port)
	if code := get(registry + "/v1/services/" + instance); code != 404 {
		t.Errorf("the provider is still registered after it stopped: %d", code)
	}
}

func get(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
