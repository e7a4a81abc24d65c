package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/freeport"
)

// TestSecureRegistryEndToEnd drives the commands as an operator would: certs init and
// issue, a registry with mTLS, RBAC and an audit log, an example provider with its client
// certificate, and a consumer that discovers it with its own.
func TestSecureRegistryEndToEnd(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	for _, args := range [][]string{
		{"certs", "init", "--dir", certs},
		{"certs", "issue", "--dir", certs, "--identity", "egress-jms"},
		{"certs", "issue", "--dir", certs, "--identity", "gateway"},
		// signed by the same CA, for the admin's name, in another trust domain
		{"certs", "issue", "--dir", certs, "--identity", "ops", "--trust-domain", "evil.example"},
	} {
		if out, err := run(context.Background(), args...); err != nil {
			t.Fatalf("meshflows %v: %v\n%s", args, err, out)
		}
	}
	rbac := filepath.Join(dir, "rbac.yaml")
	os.WriteFile(rbac, []byte(`
identities: {egress-jms: [provider], gateway: [consumer], ops: [admin]}
roles:
  provider: {capabilities: ["messaging.*"], path_prefixes: ["/api/messaging/jms"]}
  consumer: {discover: true}
  admin: {admin: true}
`), 0o600)
	regPort, provPort := freeport.Port(t), freeport.Port(t)
	registryURL := "https://127.0.0.1:" + strconv.Itoa(regPort)
	audit := filepath.Join(dir, "audit.jsonl")

	ctx, cancel := context.WithCancel(context.Background())
	regDone, provDone := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := run(ctx, "registry", "--listen", "127.0.0.1:"+strconv.Itoa(regPort), "--tls-cert", filepath.Join(certs, "server.pem"),
			"--tls-key", filepath.Join(certs, "server-key.pem"), "--client-ca", filepath.Join(certs, "ca.pem"), "--rbac", rbac,
			"--audit-log", audit, "--log-level", "error", "--gateway-ttl", "1s") // no gateway: the provider's drain wait ends once the registry is 1 s old
		regDone <- err
	}()
	provCtx, stopProvider := context.WithCancel(ctx)
	go func() {
		_, err := run(provCtx, "example-provider", "--kind", "jms", "--registry", registryURL, "--listen", "127.0.0.1:"+strconv.Itoa(provPort),
			"--ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "egress-jms.pem"), "--tls-key", filepath.Join(certs, "egress-jms-key.pem"),
			"--log-level", "error")
		provDone <- err
	}()

	tlsCfg, err := client.TLSConfig(filepath.Join(certs, "ca.pem"), filepath.Join(certs, "gateway.pem"), filepath.Join(certs, "gateway-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	consumer := client.HTTPClient(tlsCfg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := consumer.Get(registryURL + "/v1/discovery/capabilities?capability_id=messaging.publish")
		if err == nil {
			var d struct {
				Capabilities []struct {
					InstanceID string `json:"instance_id"`
				} `json:"capabilities"`
			}
			json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if len(d.Capabilities) == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the provider never became discoverable over mTLS: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The registry trusts the domain 'certs init' writes, not every SPIFFE ID its CA signed.
	evilTLS, err := client.TLSConfig(filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ops.pem"), filepath.Join(certs, "ops-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.HTTPClient(evilTLS).Post(registryURL+"/v1/admin/snapshot", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("spiffe://evil.example/ops as the admin 'ops': %d, want 401", resp.StatusCode)
	}
	stopProvider()
	if err := <-provDone; err != nil {
		t.Errorf("example-provider: %v", err)
	}
	cancel()
	if err := <-regDone; err != nil {
		t.Errorf("registry: %v", err)
	}
	data, _ := os.ReadFile(audit)
	for _, want := range []string{`"identity":"egress-jms","method":"POST","path":"/v1/services/register"`, `"identity":"gateway","method":"GET"`, `"method":"DELETE"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("audit log lacks %s:\n%s", want, data)
		}
	}
}

// TestSecureGatewayAndOrchestrator: with the registry in mTLS, the gateway's admin
// endpoints and the orchestrator's API take the same credentials and the same RBAC file.
// Before, anyone who reached them could upload, publish and run workflows and flood the
// gateway's invalidation under the gateway's identity.
func TestSecureGatewayAndOrchestrator(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	cmds := [][]string{{"certs", "init", "--dir", certs}}
	ids := []string{"gateway", "orchestrator", "reader", "author", "runner", "gwadmin", "ops"}
	for _, id := range ids {
		cmds = append(cmds, []string{"certs", "issue", "--dir", certs, "--identity", id})
	}
	for _, args := range cmds {
		if out, err := run(context.Background(), args...); err != nil {
			t.Fatalf("meshflows %v: %v\n%s", args, err, out)
		}
	}
	rbac := filepath.Join(dir, "rbac.yaml")
	os.WriteFile(rbac, []byte(`
identities: {gateway: [gateway], orchestrator: [consumer], reader: [reader], author: [author], runner: [runner], gwadmin: [gwadmin], ops: [admin]}
roles:
  gateway: {discover: true, gateway: true}
  consumer: {discover: true}
  reader: {workflows: read}
  author: {workflows: [write]}
  runner: {workflows: [run]}
  gwadmin: {gateway_admin: true}
  admin: {admin: true}
`), 0o600)
	pem := func(name string) string { return filepath.Join(certs, name) }
	serverFlags := []string{"--tls-cert", pem("server.pem"), "--tls-key", pem("server-key.pem"), "--client-ca", pem("ca.pem"), "--rbac", rbac, "--log-level", "error"}
	regPort, orPort, gwPort := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	regURL := "https://127.0.0.1:" + strconv.Itoa(regPort)
	orURL := "https://127.0.0.1:" + strconv.Itoa(orPort)
	gwURL := "https://127.0.0.1:" + strconv.Itoa(gwPort)
	clients := map[string]*http.Client{}
	for _, id := range append(ids, "") {
		cert, key := "", ""
		if id != "" {
			cert, key = pem(id+".pem"), pem(id+"-key.pem")
		}
		tlsCfg, err := client.TLSConfig(pem("ca.pem"), cert, key)
		if err != nil {
			t.Fatal(err)
		}
		clients[id] = client.HTTPClient(tlsCfg)
	}
	startCommandWith(t, clients[""], regURL+"/healthz", append([]string{"registry", "--listen", "127.0.0.1:" + strconv.Itoa(regPort)}, serverFlags...)...)
	startCommandWith(t, clients[""], orURL+"/healthz", append([]string{"orchestrator", "--listen", "127.0.0.1:" + strconv.Itoa(orPort), "--registry", regURL,
		"--registry-ca", pem("ca.pem"), "--registry-cert", pem("orchestrator.pem"), "--registry-key", pem("orchestrator-key.pem")}, serverFlags...)...)
	startCommandWith(t, clients[""], gwURL+"/v1/gateway/routes", append([]string{"gateway", "--listen", "127.0.0.1:" + strconv.Itoa(gwPort), "--registry", regURL,
		"--registry-ca", pem("ca.pem"), "--registry-cert", pem("gateway.pem"), "--registry-key", pem("gateway-key.pem")}, serverFlags...)...)

	workflow := "name: hello\ninvocation: {type: http}\nsteps:\n  - id: s\n    type: service_call\n    step_version: \"1.1\"\n" +
		"    capability: {id: messaging.publish, capability_version: \">=1.0\"}\n    request: {destination: d, payload_from: input}\n"
	tests := []struct {
		who, method, url, body string
		want                   int
	}{
		{"", "POST", orURL + "/v1/workflows", workflow, 401},
		{"reader", "POST", orURL + "/v1/workflows", workflow, 403},
		{"runner", "POST", orURL + "/v1/workflows", workflow, 403},
		{"gwadmin", "POST", orURL + "/v1/workflows", workflow, 403},
		{"author", "POST", orURL + "/v1/workflows", workflow, 201},
		{"", "GET", orURL + "/v1/workflows", "", 401},
		{"reader", "GET", orURL + "/v1/workflows", "", 200},
		{"author", "GET", orURL + "/v1/workflows/hello", "", 200},
		{"", "POST", orURL + "/v1/workflows/hello/publish", "", 401},
		{"reader", "POST", orURL + "/v1/workflows/hello/validate", "", 403},
		{"", "POST", orURL + "/v1/workflows/hello/run", "{}", 401},
		{"author", "POST", orURL + "/v1/workflows/hello/run", "{}", 403},
		{"runner", "GET", orURL + "/v1/workflows/hello/runs", "", 200},
		{"", "DELETE", orURL + "/v1/discovery/invalidate", "", 401},
		{"runner", "DELETE", orURL + "/v1/discovery/invalidate", "", 403},
		{"author", "DELETE", orURL + "/v1/discovery/invalidate", "", 200},
		{"ops", "DELETE", orURL + "/v1/discovery/invalidate", "", 200},
		{"", "GET", orURL + "/healthz", "", 200},
		{"", "DELETE", gwURL + "/v1/discovery/invalidate", "", 401},
		{"gateway", "DELETE", gwURL + "/v1/discovery/invalidate", "", 403},
		{"author", "DELETE", gwURL + "/v1/discovery/invalidate", "", 403},
		{"gwadmin", "DELETE", gwURL + "/v1/discovery/invalidate", "", 200},
		{"ops", "DELETE", gwURL + "/v1/discovery/invalidate", "", 200},
		{"", "GET", gwURL + "/api/nothing/here", "", 404}, // proxied traffic needs no credential
	}
	for _, tt := range tests {
		name, server := tt.who, "orchestrator"
		if name == "" {
			name = "anonymous"
		}
		if strings.HasPrefix(tt.url, gwURL) {
			server = "gateway"
		}
		t.Run(name+" "+tt.method+" "+server+" /"+strings.SplitN(tt.url, "/", 4)[3], func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
			if tt.body != "" {
				req.Header.Set("Content-Type", "application/json")
				if strings.HasPrefix(tt.body, "name:") {
					req.Header.Set("Content-Type", "application/yaml")
				}
			}
			resp, err := clients[tt.who].Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("%s %s as %q = %d, want %d\n%s", tt.method, tt.url, tt.who, resp.StatusCode, tt.want, body)
			}
			if tt.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("a 401 without WWW-Authenticate")
			}
		})
	}

	// The routes table: a summary for anyone, the routes for gateway_admin.
	for who, wantSummary := range map[string]bool{"": true, "gateway": true, "gwadmin": false, "ops": false} {
		resp, err := clients[who].Get(gwURL + "/v1/gateway/routes")
		if err != nil {
			t.Fatal(err)
		}
		var ans map[string]any
		json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		_, hasRoutes := ans["routes"]
		if resp.StatusCode != 200 || ans["summary"] == true != wantSummary || hasRoutes == wantSummary {
			t.Errorf("GET /v1/gateway/routes as %q = %d %v, want summary=%v", who, resp.StatusCode, ans, wantSummary)
		}
	}
}

// devCerts runs 'meshflows certs init' in a new directory and 'certs issue' for each
// identity, and returns the directory.
func devCerts(t *testing.T, identities ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	cmds := [][]string{{"certs", "init", "--dir", dir}}
	for _, id := range identities {
		cmds = append(cmds, []string{"certs", "issue", "--dir", dir, "--identity", id})
	}
	for _, args := range cmds {
		if out, err := run(context.Background(), args...); err != nil {
			t.Fatalf("meshflows %v: %v\n%s", args, err, out)
		}
	}
	return dir
}
