package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goccy/go-yaml"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestGetDescribeStatus runs the CLI's read commands against meshflows dev: every kind in
// every output, the filters, describe, status, and the environment variables standing in
// for the flags.
func TestGetDescribeStatus(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	url := func(offset int) string { return "http://127.0.0.1:" + strconv.Itoa(base+offset) }
	remote := []string{"--registry", url(devRegistryOffset), "--orchestrator", url(devOrchestratorOffset), "--gateway", url(devGatewayOffset)}
	get := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := run(ctx, append(args, remote...)...)
		if err != nil {
			t.Fatalf("meshflows %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	jms := "egress-jms-" + strconv.Itoa(base+devProviderOffsetJMS)
	tests := []struct {
		args []string
		want []string // lines or fragments the output holds
	}{
		{[]string{"get", "instances"}, []string{"INSTANCE", "SERVICE", "ELIGIBILITY", jms, "egress-rabbitmq"}},
		{[]string{"get", "instance", "-o", "wide"}, []string{"GENERATION", "messaging.publish@1.0.0"}},
		{[]string{"get", "services"}, []string{"SERVICE", "IN ROTATION", "egress-jms", "egress-rabbitmq"}},
		{[]string{"get", "capabilities", "--provider", "jms", "--constraint", ">=1.0 <2.0"}, []string{"messaging.publish", jms}},
		{[]string{"get", "routes"}, []string{"METHOD", "/api/messaging/jms/publish", "egress-jms@0.1.3"}},
		{[]string{"get", "routes", "-o", "wide"}, []string{"MAX BODY", "SCHEMA", "1048576", "/schemas/publish.json"}},
		{[]string{"get", "workflows"}, []string{"WORKFLOW", "order-publish", "order-batch"}},
		{[]string{"get", "runs", "--workflow", "order-publish"}, []string{"RUN", "succeeded"}},
		{[]string{"get", "incidents", "--status", "unresolved"}, []string{"ID", "SEVERITY"}},
		{[]string{"get", "events", "--type", "instance.registered"}, []string{"SEQ", "instance.registered", jms}},
		{[]string{"describe", "instance", jms}, []string{"Instance:     " + jms, "Lease:", "Eligibility:", "Transitions (newest last):", "ADMITTING"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out := get(t, tt.args...)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("a filter narrows", func(t *testing.T) {
		if out := get(t, "get", "capabilities", "--provider", "jms"); strings.Contains(out, "rabbitmq") {
			t.Errorf("--provider jms lists rabbitmq:\n%s", out)
		}
	})
	t.Run("json and yaml are the API's answer", func(t *testing.T) {
		var cat struct {
			Instances []struct {
				InstanceID string `json:"instance_id"`
			} `json:"instances"`
		}
		if err := json.Unmarshal([]byte(get(t, "get", "instances", "-o", "json")), &cat); err != nil || len(cat.Instances) != 2 {
			t.Errorf("-o json: %v %+v", err, cat)
		}
		var y map[string]any
		if err := yaml.Unmarshal([]byte(get(t, "get", "routes", "-o", "yaml")), &y); err != nil || y["routes"] == nil {
			t.Errorf("-o yaml: %v %v", err, y)
		}
		var d struct {
			Instance    map[string]any `json:"instance"`
			Eligibility map[string]any `json:"eligibility"`
		}
		if err := json.Unmarshal([]byte(get(t, "describe", "instance", jms, "-o", "json")), &d); err != nil || d.Eligibility["state"] == nil {
			t.Errorf("describe -o json: %v %+v", err, d)
		}
	})
	t.Run("operator actions", func(t *testing.T) {
		reg := []string{"--registry", url(devRegistryOffset)}
		act := func(args ...string) (string, error) { return run(ctx, append(args, reg...)...) }
		// jms is the only instance behind its routes and the only jms provider: its group in
		// zone a keeps rabbitmq, but the route's pool and a jms step's candidates would be
		// empty, and their panic would serve it again
		registrytest.Until(t, "both dev providers admitted", func() bool {
			out := get(t, "get", "instances")
			return strings.Count(out, "serving")+strings.Count(out, "slow_start") == 2
		})
		_, err := act("override", "withdraw", jms, "--for", "30m", "--reason", "drill")
		if err == nil || !strings.Contains(strings.ToUpper(err.Error()), apiv1.CodeOverrideUnsafe) || !strings.Contains(err.Error(), "route/POST /api/messaging/jms/publish") ||
			!strings.Contains(err.Error(), "step/messaging.publish/jms") || strings.Contains(err.Error(), "group/messaging.publish/a") {
			t.Fatalf("override withdraw of the only jms instance: %v, want %s naming its route and step pools, not its group\n%s", err, apiv1.CodeOverrideUnsafe, get(t, "get", "instances"))
		}
		publish := func() int {
			resp, err := http.Post(url(devGatewayOffset)+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"d","payload":1}`))
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := publish(); code != http.StatusAccepted {
			t.Fatalf("a publish after the refused withdrawal answered %d, want 202: nothing changed", code)
		}
		if out, err := act("override", "withdraw", jms, "--for", "30m", "--reason", "drill", "--force"); err != nil || !strings.Contains(out, "withdraw (forced)") || !strings.Contains(out, "true") {
			t.Fatalf("override withdraw --force: %v\n%s", err, out)
		}
		// forced: the gateway sends it nothing, even though the route's pool is empty (panic)
		registrytest.Until(t, "the gateway stops sending the forced-out instance requests", func() bool { return publish() == http.StatusServiceUnavailable })
		if out := get(t, "describe", "instance", jms); !strings.Contains(out, "OPERATOR_FORCED") {
			t.Errorf("describe after a forced withdrawal does not say OPERATOR_FORCED:\n%s", out)
		}
		if out := get(t, "get", "overrides"); !strings.Contains(out, jms) || !strings.Contains(out, "drill") {
			t.Errorf("get overrides:\n%s", out)
		}
		if out, err := act("override", "release", jms); err != nil {
			t.Errorf("override release: %v\n%s", err, out)
		}
		if _, err := act("evacuate", "zone", "nowhere", "--for", "1h", "--reason", "r"); err == nil || !strings.Contains(strings.ToUpper(err.Error()), "UNKNOWN_ZONE") {
			t.Errorf("evacuate an unknown zone: %v", err)
		}
		// both providers of dev are in zone a: evacuating it leaves nothing, unless forced
		if _, err := act("evacuate", "zone", "a", "--for", "1h", "--reason", "r"); err == nil || !strings.Contains(strings.ToUpper(err.Error()), "EVACUATION_UNSAFE") || !strings.Contains(err.Error(), "0 of ") {
			t.Errorf("evacuate the only zone: %v", err)
		}
		out, err := act("evacuate", "zone", "a", "--for", "1h", "--reason", "drill", "--force", "-o", "json")
		var ev apiv1.Evacuation
		if err != nil || json.Unmarshal([]byte(out), &ev) != nil || ev.State != apiv1.EvacuationActive {
			t.Fatalf("evacuate --force: %v\n%s", err, out)
		}
		if out := get(t, "get", "evacuations"); !strings.Contains(out, ev.ID) || !strings.Contains(out, "active") {
			t.Errorf("get evacuations:\n%s", out)
		}
		if out, err := act("evacuate", "extend", ev.ID, "--for", "2h"); err != nil || !strings.Contains(out, "active") {
			t.Errorf("evacuate extend: %v\n%s", err, out)
		}
		if out, _ := act("status", "--no-gateway"); !strings.Contains(out, "Evacuation:   "+ev.ID+" zone a (every capability) active") {
			t.Errorf("status during the evacuation:\n%s", out)
		}
		if out, err := act("evacuate", "cancel", ev.ID); err != nil || !strings.Contains(out, "returning") {
			t.Errorf("evacuate cancel: %v\n%s", err, out)
		}
		if out, _ := act("status", "--no-gateway"); !strings.Contains(out, "returning: step 1 of 3, weight 10") {
			t.Errorf("status during the return:\n%s", out)
		}
	})
	t.Run("status", func(t *testing.T) {
		out, err := run(ctx, append([]string{"status"}, remote...)...)
		var ee *exitError
		// a fresh dev registry warms up for a lease TTL: degraded (1) until then, healthy (0) after
		if err != nil && (!errors.As(err, &ee) || ee.code != 1) {
			t.Fatalf("status: %v\n%s", err, out)
		}
		for _, w := range []string{"Registry:", "Epoch:", "2 instances", "Gateway:", "table fresh", "Verdict:"} {
			if !strings.Contains(out, w) {
				t.Errorf("status lacks %q:\n%s", w, out)
			}
		}
		var rep statusReport
		out, _ = run(ctx, append([]string{"status", "-o", "json"}, remote...)...)
		if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Reachable || rep.Health.ActiveInstances != 2 || rep.Gateway.Routes != 4 {
			t.Errorf("status -o json: %v %+v", err, rep)
		}
	})
	t.Run("environment variables stand in for flags, flags win", func(t *testing.T) {
		t.Setenv("MESHFLOWS_REGISTRY", "http://127.0.0.1:1,"+url(devRegistryOffset)) // failover past a dead one
		t.Setenv("MESHFLOWS_GATEWAY", url(devGatewayOffset))
		out, err := run(ctx, "get", "instances")
		if err != nil || !strings.Contains(out, jms) {
			t.Errorf("with MESHFLOWS_REGISTRY: %v\n%s", err, out)
		}
		if out, err := run(ctx, "get", "instances", "--registry", "http://127.0.0.1:1"); err == nil {
			t.Errorf("the flag did not win over the variable:\n%s", out)
		}
		t.Setenv("MESHFLOWS_REGISTRY", "ftp://nope")
		_, err = run(ctx, "get", "instances")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), `"ftp://nope"`) {
			t.Errorf("a bad URL in the variable: %v, want exit 2 naming it", err)
		}
	})
	t.Run("status of an unreachable registry exits 2", func(t *testing.T) {
		_, err := run(ctx, "status", "--registry", "http://127.0.0.1:1", "--no-gateway")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("status: %v, want exit 2", err)
		}
	})
}

// TestCLIBadInput: unknown kinds and outputs exit 2 with the valid values.
func TestCLIBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "nonsense"}, "want one of services, instances, capabilities, routes, workflows, runs, incidents, events"},
		{[]string{"get", "instances", "-o", "xml"}, "want one of table, wide, json, yaml"},
		{[]string{"get", "runs"}, "needs --workflow"},
		{[]string{"describe", "pod", "x"}, "usage: meshflows describe instance ID"},
		{[]string{"version", "-o", "xml"}, "want one of text, json, yaml"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := run(context.Background(), tt.args...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want exit 2 saying %q", err, tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	version, commit, buildDate = "v1.2.3", "0123456789abcdef", "2026-11-30T10:00:00Z"
	t.Cleanup(func() { version, commit, buildDate = "", "", "" })
	out, err := run(context.Background(), "version", "-o", "json")
	var b buildInfo
	if err != nil || json.Unmarshal([]byte(out), &b) != nil || b.Version != "v1.2.3" || b.Commit != "0123456789abcdef" || b.BuildDate != "2026-11-30T10:00:00Z" || b.GoVersion == "" {
		t.Errorf("version -o json = %s %v", out, err)
	}
	out, err = run(context.Background(), "version")
	if err != nil || !strings.HasPrefix(out, "meshflows v1.2.3\ncommit:     0123456789abcdef\nbuild date: 2026-11-30T10:00:00Z\ngo:") {
		t.Errorf("version = %q %v", out, err)
	}
	out, err = run(context.Background(), "--version")
	if err != nil || out != "meshflows v1.2.3\n" {
		t.Errorf("--version = %q %v", out, err)
	}
}

func TestCertsInitHosts(t *testing.T) {
	dir := t.TempDir()
	if out, err := run(context.Background(), "certs", "init", "--dir", dir, "--host", "registry.internal,10.0.0.5", "--host", "gw.example.com"); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cert.DNSNames, "registry.internal") || !slices.Contains(cert.DNSNames, "gw.example.com") || !slices.Contains(cert.DNSNames, "localhost") ||
		!slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.String() == "10.0.0.5" }) {
		t.Errorf("server certificate names %v %v", cert.DNSNames, cert.IPAddresses)
	}
	if _, err := run(context.Background(), "certs", "init", "--dir", t.TempDir(), "--host", "bad host!"); err == nil || !strings.Contains(err.Error(), `"bad host!"`) {
		t.Errorf("a bad --host: %v", err)
	}
	_, err = run(context.Background(), "certs", "issue", "--dir", dir)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--identity is required") {
		t.Errorf("certs issue without --identity: %v", err)
	}
}

// TestGetAFilteredCatalog: get instances and get services with --service or --provider
// list what the filters keep, selected by the registry (its catalog summary), without
// reading the whole catalog; from a registry without the summary (an older one), they read
// the catalog and filter it themselves.
func TestGetAFilteredCatalog(t *testing.T) {
	reg := registrytest.NewServer(t, registry.Config{})
	for _, r := range []apiv1.RegisterRequest{registrytest.Orders("orders-1", "http://127.0.0.1:9001"), registrytest.Orders("orders-2", "http://127.0.0.1:9002")} {
		if _, err := reg.Registry.Register(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	other := apiv1.RegisterRequest{InstanceID: "billing-1", ServiceName: "billing", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9003",
		Capabilities: []apiv1.Capability{{CapabilityID: "billing.charge", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "stripe"}}}
	if _, err := reg.Registry.Register(context.Background(), &other); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(reg.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("summary gone %v", old), func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				if old && r.URL.Path == apiv1.PathCatalogSummary {
					httpapi.WriteError(w, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no route"))
					return
				}
				proxy.ServeHTTP(w, r)
			}))
			defer spy.Close()
			for _, tc := range []struct {
				args      []string
				want, not string
			}{
				{[]string{"get", "instances", "--service", "billing"}, "billing-1", "orders-1"},
				{[]string{"get", "services", "--provider", "stripe"}, "billing", "orders"},
			} {
				out, err := run(context.Background(), append(tc.args, "--registry", spy.URL)...)
				if err != nil {
					t.Fatalf("%v: %v\n%s", tc.args, err, out)
				}
				if !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
					t.Errorf("%v lists (want %s, not %s):\n%s", tc.args, tc.want, tc.not, out)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if read := slices.Contains(paths, apiv1.PathServices); read != old {
				t.Errorf("the whole catalog read: %v, want %v (asked: %v)", read, old, paths)
			}
		})
	}
}

// TestARegionalRegistrySaysItsRegion: `get instances -o wide` shows the region of a registry
// started with --region, filtered or not, and `status` says it.
func TestARegionalRegistrySaysItsRegion(t *testing.T) {
	reg := registrytest.NewServer(t, registry.Config{Region: "eu-west"})
	r := registrytest.Orders("orders-1", "http://127.0.0.1:9001")
	if _, err := reg.Registry.Register(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"get", "instances", "-o", "wide", "--registry", reg.URL},
		{"get", "instances", "-o", "wide", "--service", "orders", "--registry", reg.URL},
		{"status", "--no-gateway", "--registry", reg.URL},
	} {
		out, err := run(context.Background(), args...)
		if err != nil && args[0] != "status" { // status says degraded: the registry warms up
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, "eu-west") {
			t.Errorf("%v does not say the region:\n%s", args, out)
		}
	}
}
