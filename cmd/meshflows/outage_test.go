package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// registryProcess runs the registry as a process of its own (this test binary, run as
// meshflows) on port, until kill.
func registryProcess(t *testing.T, port int) (kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--log-level", "error")
	cmd.Env = append(os.Environ(), asMeshflows+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(kill)
	registrytest.Until(t, "the registry process serves", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return kill
}

// TestARegistryKilledForTwoMinutesLosesNoRequest: a registry process, a gateway and an
// example provider at default settings, 10 publishes a second through the gateway. The
// registry is killed (SIGKILL) for two minutes, then started again empty: not one publish
// fails — the gateway routes on its last-known-good view all along, says so
// (X-Cache-Source: snapshot), and the provider registers again with the new registry.
func TestARegistryKilledForTwoMinutesLosesNoRequest(t *testing.T) {
	t.Parallel()
	regPort, gwPort, provPort := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	reg := "http://127.0.0.1:" + strconv.Itoa(regPort)
	gw := "http://127.0.0.1:" + strconv.Itoa(gwPort)
	prov := "http://127.0.0.1:" + strconv.Itoa(provPort)
	kill := registryProcess(t, regPort)
	startPolicyGateway(t, reg, gwPort, "path_prefixes: {egress-jms: [/api/messaging/jms]}\n")
	startCommand(t, prov+"/metrics", "example-provider", "--kind", "jms", "--registry", reg, "--listen", "127.0.0.1:"+strconv.Itoa(provPort), "--log-level", "error")
	publish := func() (int, string) {
		resp, err := http.Post(gw+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"outage","payload":1}`))
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Cache-Source")
	}
	registrytest.Until(t, "publishes go through", func() bool { code, _ := publish(); return code == http.StatusAccepted })

	var sent, failed, snapshot atomic.Int64
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			code, source := publish()
			sent.Add(1)
			if code != http.StatusAccepted {
				if failed.Add(1) <= 5 {
					t.Errorf("a publish answered %d during the outage", code)
				}
			}
			if source == "snapshot" {
				snapshot.Add(1)
			}
		}
	})
	t.Cleanup(func() { close(stop); load.Wait() })
	time.Sleep(2 * time.Second)
	kill()
	time.Sleep(2 * time.Minute)
	if snapshot.Load() == 0 {
		t.Error("no publish said it was routed on the last-known-good view (X-Cache-Source: snapshot)")
	}
	registryProcess(t, regPort)
	registrytest.Until(t, "the provider registered again with the new registry", func() bool {
		resp, err := http.Get(reg + "/v1/services")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return strings.Contains(b.String(), "egress-jms-"+strconv.Itoa(provPort))
	})
	time.Sleep(3 * time.Second)
	t.Logf("registry killed for 2 minutes: %d publishes sent, %d failed, %d answered from the last-known-good view", sent.Load(), failed.Load(), snapshot.Load())
	if failed.Load() != 0 {
		t.Errorf("%d of %d publishes failed across a two-minute registry outage, want none", failed.Load(), sent.Load())
	}
}

// TestStatusSpeaksForTheGateway: with the registry down, meshflows status still asks the
// gateway and says how old its table is and how many routes refuse requests on their
// max_stale (the policy file bounds /api/messaging/jms to 1 s here).
func TestStatusSpeaksForTheGateway(t *testing.T) {
	t.Parallel()
	regPort, gwPort, provPort := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	reg := "http://127.0.0.1:" + strconv.Itoa(regPort)
	gw := "http://127.0.0.1:" + strconv.Itoa(gwPort)
	kill := registryProcess(t, regPort)
	startPolicyGateway(t, reg, gwPort, "path_prefixes: {egress-jms: [/api/messaging/jms]}\nmax_stale: {/api/messaging/jms/publish: 1s}\n")
	startCommand(t, "http://127.0.0.1:"+strconv.Itoa(provPort)+"/metrics", "example-provider", "--kind", "jms", "--registry", reg,
		"--listen", "127.0.0.1:"+strconv.Itoa(provPort), "--log-level", "error")
	publish := func() int {
		resp, err := http.Post(gw+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"d","payload":1}`))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	registrytest.Until(t, "publishes go through", func() bool { return publish() == http.StatusAccepted })
	kill()
	registrytest.Until(t, "the bounded route refuses", func() bool { return publish() == http.StatusServiceUnavailable })
	out, err := run(context.Background(), "status", "--registry", reg, "--gateway", gw)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Errorf("status with the registry down: %v, want exit 2", err)
	}
	if !strings.Contains(out, "UNREACHABLE") || !strings.Contains(out, "table snapshot") || !strings.Contains(out, "1 refusing") {
		t.Errorf("status with the registry down says nothing of the gateway's refusing route:\n%s", out)
	}
}

// startPolicyGateway starts a gateway on port, over the registry reg, with the policy file
// policy (YAML) and the flags extra, until the test ends.
func startPolicyGateway(t *testing.T, reg string, port int, policy string, extra ...string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"gateway", "--insecure", "--registry", reg, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--policy", path, "--log-level", "error"}, extra...)
	startCommand(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/v1/gateway/routes", args...)
}
