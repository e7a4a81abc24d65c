package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/client"
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
	regPort, provPort := freePort(t), freePort(t)
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
