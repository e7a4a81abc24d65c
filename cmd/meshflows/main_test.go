package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

func run(ctx context.Context, args ...string) (string, error) {
	cmd := newRootCmd()
	var out registrytest.SyncBuffer // the command's output and its log flusher share it
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestHelpReadsWell(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"registry", "dev", "bench", "version"}},
		{[]string{"registry", "--help"}, []string{"--listen", "--lease-ttl", "--heartbeat-interval", "--sweep-interval",
			"--max-body-bytes", "--snapshot-dir", "--snapshot-interval", "--restore-snapshot", "--insecure"}},
		{[]string{"dev", "--help"}, []string{"--base-port", "registry      N+0", "providers     N+10"}},
		{[]string{"bench", "registry", "--help"}, []string{"--registry", "--instances", "--concurrency", "-o, --output"}},
		{[]string{"gateway", "--help"}, []string{"--listen", "--registry", "--routes", "--policy", "--rbac", "--cache-ttl", "--max-stale", "--registry-ca", "--registry-cert", "--tls-cert", "--client-ca", "--jwt-keys", "--insecure"}},
		{[]string{"orchestrator", "--help"}, []string{"--registry-ca", "--registry-cert", "--tls-cert", "--client-ca", "--jwt-keys", "--rbac", "--insecure", "workflows: [read, write, run]"}},
		{[]string{"routes", "derive", "--help"}, []string{"--case", "--manifests", "--static", "--policy"}},
		{[]string{"certs", "--help"}, []string{"init", "issue"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := run(context.Background(), tt.args...)
			if err != nil {
				t.Fatalf("meshflows %v: %v", tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("meshflows %v does not mention %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
}

// TestServersRefuseToRunOpenByAccident: every server with write endpoints needs TLS and
// RBAC, or --insecure to say that running open is meant.
func TestServersRefuseToRunOpenByAccident(t *testing.T) {
	for _, component := range []string{"registry", "gateway", "orchestrator"} {
		t.Run(component, func(t *testing.T) {
			_, err := run(context.Background(), component, "--listen", "127.0.0.1:0")
			if err == nil || !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("meshflows %s without --insecure = %v, want a refusal naming --insecure", component, err)
			}
		})
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"registry", "--insecure", "--listen", "127.0.0.1:0", "--lease-ttl", "10s", "--heartbeat-interval", "20s"},
		{"registry", "--insecure", "--listen", "127.0.0.1:0", "--log-level", "loud"},
		{"registry", "--insecure", "--listen", "127.0.0.1:0", "--restore-snapshot", "/does/not/exist.json"},
		{"dev", "--base-port", "65530"},
		{"bench", "registry", "--registry", "not a url"},
	} {
		if _, err := run(context.Background(), args...); err == nil {
			t.Errorf("meshflows %v succeeded, want an error", args)
		}
	}
}

// startDev runs 'meshflows dev' on a free port plan, trying another base port when
// something else on the machine holds one of the plan's twelve ports.
func startDev(t *testing.T, ctx context.Context, extra ...string) (base int, done <-chan devResult) {
	t.Helper()
	for attempt := 0; attempt < 10; attempt++ {
		base = freeport.Block(t, devProviderOffsetRMQ+1)
		ch := make(chan devResult, 1)
		go func() {
			out, err := run(ctx, append([]string{"dev", "--base-port", strconv.Itoa(base)}, extra...)...)
			ch <- devResult{out, err}
		}()
		url := "http://127.0.0.1:" + strconv.Itoa(base) + "/v1/discovery/health"
		deadline := time.Now().Add(20 * time.Second)
	wait:
		for {
			select {
			case r := <-ch:
				if !errors.Is(r.err, errDevPortBusy) {
					t.Fatalf("dev ended before serving: %v\n%s", r.err, r.out)
				}
				t.Logf("port plan at %d busy, trying another: %v", base, r.err)
				break wait
			default:
			}
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("GET %s = %d", url, resp.StatusCode)
				}
				return base, ch
			}
			if time.Now().After(deadline) {
				t.Fatalf("dev did not serve %s: %v", url, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal("no free port plan for dev after 10 attempts")
	return 0, nil
}

// waitDevReady waits until the dev stack at base routes through its gateway from a fresh
// table and runs its example workflow to success: every component is up and connected.
func waitDevReady(t *testing.T, base int) {
	t.Helper()
	gw := "http://127.0.0.1:" + strconv.Itoa(base+devGatewayOffset) + "/api/messaging/rabbitmq/messages"
	registrytest.Until(t, "the gateway routes to the rabbitmq provider from a fresh table", func() bool {
		resp, err := http.Get(gw)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Cache-Source") == "fresh"
	})
	run := "http://127.0.0.1:" + strconv.Itoa(base+devOrchestratorOffset) + "/v1/workflows/order-publish/run"
	registrytest.Until(t, "the example workflow runs to success", func() bool {
		resp, err := http.Post(run, "application/json", strings.NewReader(`{"order": 1}`))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
		}
		json.NewDecoder(resp.Body).Decode(&r)
		return r.Status == "succeeded"
	})
	// the pool of a new service serves before its first probe (the panic rule); the docs'
	// tour withdraws an instance beside dev's own, which must be in rotation by then
	services := "http://127.0.0.1:" + strconv.Itoa(base+devRegistryOffset) + apiv1.PathServices
	registrytest.Until(t, "dev's providers are in rotation", func() bool {
		resp, err := http.Get(services)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var c apiv1.CatalogResponse
		if json.NewDecoder(resp.Body).Decode(&c) != nil || len(c.Instances) < 2 {
			return false
		}
		for _, in := range c.Instances {
			if !apiv1.InRotation(in.Eligibility) {
				return false
			}
		}
		return true
	})
	// dev publishes its example workflows one after the other: order-batch follows the one
	// that just ran
	list := "http://127.0.0.1:" + strconv.Itoa(base+devOrchestratorOffset) + "/v1/workflows"
	registrytest.Until(t, "both example workflows are published", func() bool {
		resp, err := http.Get(list)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var l apiv1.WorkflowList
		json.NewDecoder(resp.Body).Decode(&l)
		published := 0
		for _, w := range l.Workflows {
			if w.Published && (w.Name == "order-publish" || w.Name == "order-batch") {
				published++
			}
		}
		return published == 2
	})
}

type devResult struct {
	out string
	err error
}

func TestDevServesAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startDev(t, ctx)
	// both example providers register themselves
	capsURL := "http://127.0.0.1:" + strconv.Itoa(base) + "/v1/discovery/capabilities?capability_id=messaging.publish"
	registrytest.Until(t, "both example providers register", func() bool {
		resp, err := http.Get(capsURL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var d struct {
			Capabilities []struct {
				Provider string `json:"provider"`
			} `json:"capabilities"`
		}
		json.NewDecoder(resp.Body).Decode(&d)
		return len(d.Capabilities) == 2 && d.Capabilities[0].Provider == "jms" && d.Capabilities[1].Provider == "rabbitmq"
	})
	// the gateway routes to them and the example workflow runs to success
	waitDevReady(t, base)
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("dev ended with %v", r.err)
	}
	for _, w := range []string{"NO AUTHENTICATION", "http://127.0.0.1:" + strconv.Itoa(base), "stopped", "deregistered"} {
		if !strings.Contains(r.out, w) {
			t.Errorf("dev output lacks %q:\n%s", w, r.out)
		}
	}
}

func TestDevPortPlanIsAllOrNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// make the gateway's port the busy one
	base := busy.Addr().(*net.TCPAddr).Port - devGatewayOffset
	for _, off := range []int{devRegistryOffset, devOrchestratorOffset} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
		if err != nil {
			t.Skipf("port %d is held by another process: %v", base+off, err)
		}
		ln.Close()
	}
	_, err = listenDevPlan(base)
	if !errors.Is(err, errDevPortBusy) || !strings.Contains(err.Error(), "gateway port") {
		t.Fatalf("listenDevPlan over a busy gateway port = %v, want a gateway errDevPortBusy", err)
	}
	// the ports bound before the failure were released
	for _, off := range []int{devRegistryOffset, devOrchestratorOffset} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
		if err != nil {
			t.Errorf("port %d still held after a failed plan: %v", base+off, err)
			continue
		}
		ln.Close()
	}
}
