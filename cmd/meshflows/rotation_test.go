package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestTheRegistryRotatesItsCertificateWithoutARestart: a registry in mTLS has its server
// certificate rewritten (cert-manager's way: new files in place); new handshakes get the new
// one within a reload interval, an established keep-alive connection keeps working, and
// /metrics reports the new expiry. Then the files are replaced by an expired certificate:
// refused, the new-but-valid one still serves, and the refusal is counted.
func TestTheRegistryRotatesItsCertificateWithoutARestart(t *testing.T) {
	certs := devCerts(t, "ops")
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	os.WriteFile(rbac, []byte("identities: {ops: [admin]}\nroles:\n  admin: {admin: true}\n"), 0o600)
	port := freeport.Port(t)
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, "registry", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--tls-cert", filepath.Join(certs, "server.pem"),
			"--tls-key", filepath.Join(certs, "server-key.pem"), "--client-ca", filepath.Join(certs, "ca.pem"), "--rbac", rbac,
			"--tls-reload-interval", "100ms", "--log-level", "error")
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	tlsCfg, err := client.TLSConfig(filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ops.pem"), filepath.Join(certs, "ops-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	kept := client.HTTPClient(tlsCfg) // one keep-alive connection, opened before the rotation
	registrytest.Until(t, "the registry serves over mTLS", func() bool {
		resp, err := kept.Get(url + "/v1/discovery/health")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	serial := func() *big.Int { // of the certificate a new handshake gets
		c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), tlsCfg.Clone())
		if err != nil {
			return nil
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	first := serial()
	ca, err := auth.LoadDevCA(certs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	write := func(l auth.Leaf) *big.Int {
		c, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(certs, "server.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644)
		os.WriteFile(filepath.Join(certs, "server-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
		return c.Leaf.SerialNumber
	}
	rotated := write(auth.Leaf{Identity: "registry", Hosts: []string{"127.0.0.1", "localhost"}, Server: true, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(48 * time.Hour)})
	registrytest.Until(t, "new handshakes get the rotated certificate", func() bool { s := serial(); return s != nil && s.Cmp(rotated) == 0 })
	if first.Cmp(rotated) == 0 {
		t.Fatal("the rotated certificate has the first one's serial")
	}
	resp, err := kept.Get(url + "/metrics") // the connection opened before: still served
	if err != nil {
		t.Fatalf("the established connection after the rotation: %v", err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `meshflows_certificate_expiry_timestamp_seconds{component="registry",role="server",subject="CN=registry,O=MeshFlows"}`
	if !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	failures := func() float64 {
		resp, err := kept.Get(url + "/metrics")
		if err != nil {
			return -1
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, `meshflows_certificate_reload_failures_total{component="registry"} `); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return -1
	}
	before := failures() // a half-written pair may have been refused once during the rotation
	write(auth.Leaf{Identity: "registry", Hosts: []string{"127.0.0.1"}, Server: true, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	registrytest.Until(t, "the expired certificate refused and counted", func() bool { return failures() > before })
	out, err := run(context.Background(), "status", "--registry", url, "--no-gateway", "--ca", filepath.Join(certs, "ca.pem"),
		"--tls-cert", filepath.Join(certs, "ops.pem"), "--tls-key", filepath.Join(certs, "ops-key.pem"))
	if !strings.Contains(out, "Certificate:  CN=registry,O=MeshFlows, serial "+rotated.String()) || !strings.Contains(out, "the registry's server certificate expires in") {
		t.Errorf("meshflows status (%v) does not show the rotated certificate's remaining time:\n%s", err, out)
	}
	if s := serial(); s == nil || s.Cmp(rotated) != 0 {
		t.Errorf("after the expired certificate a handshake got %v, want the rotated %v", s, rotated)
	}
}
