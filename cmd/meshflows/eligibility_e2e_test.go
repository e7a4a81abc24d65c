package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/provider"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// startCommand runs a meshflows command until the test ends and waits until url answers.
func startCommand(t *testing.T, url string, args ...string) {
	t.Helper()
	startCommandWith(t, http.DefaultClient, url, args...)
}

// startCommandWith is startCommand asking url with client (an https server's CA, say).
func startCommandWith(t *testing.T, client *http.Client, url string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		out, err := run(ctx, args...)
		done <- fmt.Sprintf("%v\n%s", err, out)
	}()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Until(t, args[0]+" serves "+url, func() bool {
		select {
		case out := <-done:
			t.Fatalf("meshflows %s ended: %s", args[0], out)
		default:
		}
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode < 500
	})
}

// fleetMember is a provider: an HTTP server whose health endpoint can fail, kept registered
// by an SDK agent.
type fleetMember struct {
	name    string
	srv     *httptest.Server
	failing atomic.Bool
}

func startMember(t *testing.T, registryURL, name string, probeInterval string) *fleetMember {
	t.Helper()
	m := &fleetMember{name: name}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health/ready" {
			if m.failing.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
			return
		}
		fmt.Fprint(w, name)
	}))
	t.Cleanup(m.srv.Close)
	reg := apiv1.RegisterRequest{InstanceID: name, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: m.srv.URL, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: name, Version: "1.0.0"},
			Routes: []apiv1.ManifestRoute{{Path: "/orders/{id}", Methods: []string{"GET"}}},
			Health: &apiv1.ManifestHealth{Path: "/health/ready", Interval: probeInterval, UnhealthyAfter: apiv1.Int(2)}}}
	runAgent(t, provider.Config{Registries: []string{registryURL}, Registration: reg, DrainTimeout: -1})
	return m
}

// runAgent keeps an SDK agent running until the test ends.
func runAgent(t *testing.T, cfg provider.Config) {
	t.Helper()
	agent, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { agent.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	json.Unmarshal(body, v)
	return resp.StatusCode
}

// TestEligibilityEndToEnd: a registry that probes, a gateway that balances by its verdicts,
// five providers kept registered by SDK agents. One provider's health endpoint fails and it
// leaves the gateway's rotation; another stops listening and leaves at its first refused
// probe; the first recovers and comes back through slow start.
func TestEligibilityEndToEnd(t *testing.T) {
	regPort, gwPort := freeport.Port(t), freeport.Port(t)
	regURL := "http://127.0.0.1:" + strconv.Itoa(regPort)
	gwURL := "http://127.0.0.1:" + strconv.Itoa(gwPort)
	startCommand(t, regURL+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(regPort),
		"--slow-start", "2s", "--sweep-interval", "100ms", "--log-level", "error")
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(policy, []byte("path_prefixes: {orders: [/orders]}\n"), 0o600)
	startCommand(t, gwURL+"/v1/gateway/routes", "gateway", "--insecure", "--registry", regURL, "--listen", "127.0.0.1:"+strconv.Itoa(gwPort),
		"--policy", policy, "--log-level", "error")

	members := map[string]*fleetMember{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		members[name] = startMember(t, regURL, name, "200ms")
	}
	served := func(n int) map[string]int {
		out := map[string]int{}
		for range n {
			resp, err := http.Get(gwURL + "/orders/1")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[string(b)]++
		}
		return out
	}
	explain := func(id string) apiv1.Explanation {
		var ex apiv1.Explanation
		getJSON(t, regURL+"/v1/services/"+id+"/eligibility", &ex)
		return ex
	}
	registrytest.Until(t, "all five serving", func() bool {
		for name := range members {
			if explain(name).State != apiv1.EligibilityServing {
				return false
			}
		}
		return len(served(25)) == 5
	})

	start := time.Now()
	members["b"].failing.Store(true)
	registrytest.Until(t, "b leaves the gateway's rotation", func() bool { return explain("b").State == apiv1.EligibilityWithdrawn && served(20)["b"] == 0 })
	t.Logf("failing health endpoint (unhealthy_after 2 × 200ms): out of the gateway's rotation after %s", time.Since(start).Round(time.Millisecond))
	if ex := explain("b"); ex.Reasons[0].Code != health.ReasonProbeFailing || !strings.Contains(ex.Reasons[0].Evidence.Detail, "2 consecutive") {
		t.Errorf("b's reasons: %+v", ex.Reasons)
	}

	start = time.Now()
	members["c"].srv.Close() // refused from now on
	registrytest.Until(t, "c leaves at its first refused probe", func() bool {
		ex := explain("c")
		return ex.State == apiv1.EligibilityWithdrawn && len(ex.Reasons) > 0 && ex.Reasons[0].Code == health.ReasonProbeRefused
	})
	t.Logf("refused connection: withdrawn after %s", time.Since(start).Round(time.Millisecond))
	// probe after probe refused (unhealthy_after 2, every 200 ms): still PROBE_REFUSED alone,
	// as the rules say; only fail and timeout count towards PROBE_FAILING
	time.Sleep(time.Second)
	if ex := explain("c"); ex.State != apiv1.EligibilityWithdrawn || len(ex.Reasons) != 1 || ex.Reasons[0].Code != health.ReasonProbeRefused {
		t.Errorf("c after five refused probes: %s %+v, want withdrawn by %s alone", ex.State, ex.Reasons, health.ReasonProbeRefused)
	}
	// the registry has withdrawn c; the gateway follows it a moment later (a long poll away)
	var h struct {
		Revision int64 `json:"revision"`
	}
	getJSON(t, regURL+"/v1/discovery/health", &h)
	registrytest.Until(t, "the gateway applies the withdrawal", func() bool {
		var r struct {
			Revision int64 `json:"registry_revision"`
		}
		getJSON(t, gwURL+"/v1/gateway/routes", &r)
		return r.Revision >= h.Revision
	})
	if got := served(30); got["b"]+got["c"] != 0 || len(got) != 3 {
		t.Errorf("3 of 5 in rotation (no panic): served %v, want only a, d, e", got)
	}

	members["b"].failing.Store(false)
	registrytest.Until(t, "b re-enters through slow start", func() bool { return explain("b").State == apiv1.EligibilitySlowStart })
	registrytest.Until(t, "b serving again", func() bool { return explain("b").State == apiv1.EligibilityServing })
	var path []string
	for _, tr := range explain("b").Transitions {
		path = append(path, tr.To)
	}
	if got := strings.Join(path, ">"); !strings.HasSuffix(got, "serving>withdrawn>slow_start>serving") {
		t.Errorf("b's transitions %s: want …serving>withdrawn>slow_start>serving", got)
	}
	registrytest.Until(t, "the gateway uses b again", func() bool { return served(20)["b"] > 0 })
}

// partition forwards to the registry until cut, then drops every connection.
type partition struct {
	proxy *httputil.ReverseProxy
	cut   atomic.Bool
}

func (p *partition) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.cut.Load() {
		panic(http.ErrAbortHandler) // the connection drops: no answer at all
	}
	p.proxy.ServeHTTP(w, r)
}

// TestSelfPreservationWithAFleetOfAgents: most of a fleet of SDK agents loses the registry
// (a partition: their heartbeats never arrive). The registry must not evict them when their
// leases run out; when the partition heals the mode ends.
func TestSelfPreservationWithAFleetOfAgents(t *testing.T) {
	regPort := freeport.Port(t)
	regURL := "http://127.0.0.1:" + strconv.Itoa(regPort)
	startCommand(t, regURL+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(regPort),
		"--lease-ttl", "3s", "--heartbeat-interval", "1s", "--sweep-interval", "100ms", "--log-level", "error")
	target, _ := url.Parse(regURL)
	cut := &partition{proxy: httputil.NewSingleHostReverseProxy(target)}
	behind := httptest.NewServer(cut)
	t.Cleanup(behind.Close)
	for i := range 12 {
		via := regURL
		if i >= 3 {
			via = behind.URL
		}
		name := fmt.Sprintf("p%02d", i)
		runAgent(t, provider.Config{Registries: []string{via}, DrainTimeout: -1, StopTimeout: 200 * time.Millisecond,
			Registration: apiv1.RegisterRequest{InstanceID: name, ServiceName: "fleet", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:1", Zone: "a",
				Capabilities: []apiv1.Capability{{CapabilityID: "fleet.work", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}}})
	}
	var h apiv1.HealthResponse
	registrytest.Until(t, "12 registered for over a window", func() bool {
		getJSON(t, regURL+"/v1/discovery/health", &h)
		return h.ActiveInstances == 12 && h.UptimeSeconds >= 4 && !h.SelfPreservation
	})
	cut.cut.Store(true)
	registrytest.Until(t, "self-preservation on", func() bool {
		getJSON(t, regURL+"/v1/discovery/health", &h)
		return h.SelfPreservation
	})
	var cat apiv1.CatalogResponse
	getJSON(t, regURL+"/v1/services", &cat)
	var lastLease time.Time
	for _, in := range cat.Instances {
		if in.InstanceID >= "p03" && in.LeaseExpiresAt.After(lastLease) {
			lastLease = in.LeaseExpiresAt
		}
	}
	registrytest.Until(t, "every cut-off lease has run out, and a few sweeps more", func() bool { return time.Now().After(lastLease.Add(time.Second)) })
	getJSON(t, regURL+"/v1/discovery/health", &h)
	if h.ActiveInstances != 12 || !h.SelfPreservation {
		t.Fatalf("leases ended at %s: %d instances, self_preservation %v; want 12 kept", lastLease, h.ActiveInstances, h.SelfPreservation)
	}
	resp, err := http.Get(regURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "meshflows_eligibility_self_preservation 1") {
		t.Error("the self-preservation gauge is not 1")
	}
	cut.cut.Store(false)
	registrytest.Until(t, "self-preservation off once renewals are back", func() bool {
		getJSON(t, regURL+"/v1/discovery/health", &h)
		return !h.SelfPreservation && h.ActiveInstances == 12
	})
}
