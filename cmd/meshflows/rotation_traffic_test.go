package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// rotationReload is the reload interval of every component in the rotation test.
const rotationReload = 250 * time.Millisecond

// TestEveryCertificateRotatesUnderTraffic runs a registry in mTLS, two example providers and
// a gateway (server certificate, client certificate to the registry) with traffic through the
// gateway on new connections, then rotates every certificate by rewriting the files, as
// cert-manager does: new server certificates, new client certificates, then a CA rotation
// (bundles with the old and the new CA, every certificate from the new CA, the old CA dropped).
// No gateway request and no heartbeat fails; each new server certificate is presented by new
// handshakes within two reload intervals, each new client certificate is loaded (its expiry on
// /metrics) and, once the old CA is gone, is the only one the registry accepts; an expired
// certificate written last is refused and the one before keeps serving.
func TestEveryCertificateRotatesUnderTraffic(t *testing.T) {
	dir := t.TempDir()
	f := func(name string) string { return filepath.Join(dir, name) }
	now := time.Now()
	ca1, err := auth.NewDevCA(now)
	if err != nil {
		t.Fatal(err)
	}
	leaves := []struct {
		file, identity string
		server         bool
	}{{"registry", "registry", true}, {"gateway-server", "gateway-server", true}, {"egress-jms", "egress-jms", false},
		{"egress-rabbitmq", "egress-rabbitmq", false}, {"gateway", "gateway", false}}
	generation := 0
	var written time.Time // when the files of a phase were written: the bounds count from then
	issueAll := func(ca *auth.DevCA) map[string]*x509.Certificate {
		defer func() { written = time.Now() }()
		generation++
		out := map[string]*x509.Certificate{}
		for _, l := range leaves {
			out[l.file] = writeLeaf(t, ca, f(l.file), auth.Leaf{Identity: l.identity, TrustDomain: auth.DefaultTrustDomain, Hosts: []string{"127.0.0.1"},
				Server: l.server, Client: !l.server, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Duration(48+generation) * time.Hour)})
		}
		return out
	}
	writeBundle(t, f("ca.pem"), ca1)
	issueAll(ca1)
	os.WriteFile(f("rbac.yaml"), []byte(`
identities: {egress-jms: [jms], egress-rabbitmq: [rabbitmq], gateway: [gateway]}
roles:
  jms: {capabilities: ["messaging.*"], path_prefixes: ["/api/messaging/jms"]}
  rabbitmq: {capabilities: ["messaging.*"], path_prefixes: ["/api/messaging/rabbitmq"]}
  gateway: {discover: true, gateway: true}
`), 0o600)
	reload := rotationReload.String()
	regPort, gwPort, jmsPort, rmqPort := freeport.Port(t), freeport.Port(t), freeport.Port(t), freeport.Port(t)
	regAddr, gwAddr := "127.0.0.1:"+strconv.Itoa(regPort), "127.0.0.1:"+strconv.Itoa(gwPort)
	trafficFiles, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: f("ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go trafficFiles.Run(ctx, rotationReload)
	probe := trafficFiles.HTTPClient() // trusts ca.pem as it is now
	startCommandWith(t, probe, "https://"+regAddr+"/healthz", "registry", "--listen", regAddr, "--tls-cert", f("registry.pem"), "--tls-key", f("registry-key.pem"),
		"--client-ca", f("ca.pem"), "--rbac", f("rbac.yaml"), "--tls-reload-interval", reload, "--log-level", "error",
		"--gateway-ttl", "1s") // the providers' drain at the end waits for no gateway gone before them
	for _, p := range []struct {
		kind string
		port int
	}{{"jms", jmsPort}, {"rabbitmq", rmqPort}} {
		id := "egress-" + p.kind
		startCommandWith(t, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(p.port)+"/healthz", "example-provider", "--kind", p.kind,
			"--listen", "127.0.0.1:"+strconv.Itoa(p.port), "--registry", "https://"+regAddr, "--heartbeat-interval", "200ms",
			"--ca", f("ca.pem"), "--tls-cert", f(id+".pem"), "--tls-key", f(id+"-key.pem"), "--tls-reload-interval", reload, "--log-level", "error")
	}
	startCommandWith(t, probe, "https://"+gwAddr+"/metrics", "gateway", "--listen", gwAddr, "--registry", "https://"+regAddr,
		"--registry-ca", f("ca.pem"), "--registry-cert", f("gateway.pem"), "--registry-key", f("gateway-key.pem"),
		"--tls-cert", f("gateway-server.pem"), "--tls-key", f("gateway-server-key.pem"), "--client-ca", f("ca.pem"), "--rbac", f("rbac.yaml"),
		"--tls-reload-interval", reload, "--log-level", "error")

	// Traffic: a publish to each provider through the gateway, every request on a new
	// connection (a new handshake), until the end.
	traffic := &http.Client{Transport: &http.Transport{TLSClientConfig: trafficFiles.TLSConfig(), DisableKeepAlives: true}, Timeout: 5 * time.Second}
	publish := func(kind string) error {
		resp, err := traffic.Post("https://"+gwAddr+"/api/messaging/"+kind+"/publish", "application/json", strings.NewReader(`{"destination":"rotation","payload":1}`))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s: %d %s", kind, resp.StatusCode, b)
		}
		return nil
	}
	t.Logf("components up after %s", time.Since(now))
	registrytest.Until(t, "both providers answer through the gateway", func() bool { return publish("jms") == nil && publish("rabbitmq") == nil })
	t.Logf("traffic flows after %s", time.Since(now))
	var sent, failed atomic.Int64
	var failures sync.Map
	tctx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, kind := range []string{"jms", "rabbitmq"} {
		wg.Go(func() {
			for tctx.Err() == nil {
				sent.Add(1)
				if err := publish(kind); err != nil && tctx.Err() == nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	presented := func(addr string, cert *x509.Certificate) func() bool { // by new handshakes
		return func() bool {
			c, err := tls.Dial("tcp", addr, trafficFiles.TLSConfig())
			if err != nil {
				return false
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(cert.SerialNumber) == 0
		}
	}
	loaded := func(url, component, subject string, cert *x509.Certificate) func() bool { // a client certificate's expiry on /metrics
		want := fmt.Sprintf(`meshflows_certificate_expiry_timestamp_seconds{component=%q,role="client",subject=%q} %s`, component, subject,
			strconv.FormatFloat(float64(cert.NotAfter.Unix()), 'e', -1, 64))
		return func() bool {
			resp, err := probe.Get(url)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return strings.Contains(string(b), want)
		}
	}
	within := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := written
		for !cond() {
			if time.Since(start) > 2*rotationReload {
				t.Errorf("%s: not within two reload intervals (%s)", what, 2*rotationReload)
				registrytest.Until(t, what, cond)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	checkAll := func(phase string, certs map[string]*x509.Certificate) {
		t.Helper()
		var took []string
		took = append(took, "registry "+within(phase+": the registry presents its new certificate", presented(regAddr, certs["registry"])).String())
		took = append(took, "gateway "+within(phase+": the gateway presents its new certificate", presented(gwAddr, certs["gateway-server"])).String())
		took = append(took, "gateway's client "+within(phase+": the gateway loads its new client certificate",
			loaded("https://"+gwAddr+"/metrics", "gateway", "CN=gateway,O=MeshFlows", certs["gateway"])).String())
		for kind, port := range map[string]int{"jms": jmsPort, "rabbitmq": rmqPort} {
			took = append(took, kind+" "+within(phase+": the "+kind+" provider loads its new client certificate",
				loaded("http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", "provider", "CN=egress-"+kind+",O=MeshFlows", certs["egress-"+kind])).String())
		}
		t.Logf("%s: on the new certificates after %s", phase, strings.Join(took, ", "))
	}

	time.Sleep(2 * rotationReload) // traffic before any rotation
	current := issueAll(ca1)
	checkAll("new certificates of the same CA", current)

	ca2, err := auth.NewDevCA(now)
	if err != nil {
		t.Fatal(err)
	}
	writeBundle(t, f("ca.pem"), ca1, ca2) // the overlap: both CAs trusted everywhere
	time.Sleep(3 * rotationReload)
	current = issueAll(ca2)
	checkAll("certificates of the new CA", current)
	writeBundle(t, f("ca.pem"), ca2) // the old CA dropped: a certificate of it is refused from now on
	time.Sleep(3 * rotationReload)
	before := sent.Load()
	registrytest.Until(t, "traffic after the old CA was dropped", func() bool { return sent.Load() > before+50 })

	// An expired certificate in place of the registry's: refused, the one in force stays.
	writeLeaf(t, ca2, f("registry"), auth.Leaf{Identity: "registry", Hosts: []string{"127.0.0.1"}, Server: true, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	time.Sleep(3 * rotationReload)
	if !presented(regAddr, current["registry"])() {
		t.Error("after an expired certificate was written the registry does not present the one in force")
	}
	stopTraffic()
	wg.Wait()

	if n := failed.Load(); n != 0 {
		var errs []string
		failures.Range(func(k, _ any) bool { errs = append(errs, k.(string)); return len(errs) < 5 })
		t.Errorf("%d of %d gateway requests failed during the rotations: %v", n, sent.Load(), errs)
	}
	for kind, port := range map[string]int{"jms": jmsPort, "rabbitmq": rmqPort} {
		if v := metricValue(t, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", "meshflows_provider_registry_heartbeat_failures_total"); v != 0 {
			t.Errorf("the %s provider's heartbeats failed %v times during the rotations", kind, v)
		}
	}
	if v := metricValue(t, probe, "https://"+regAddr+"/metrics", `meshflows_certificate_reload_failures_total{component="registry"}`); v < 1 {
		t.Errorf("the expired certificate was not counted as refused (%v)", v)
	}
	t.Logf("%d gateway requests during the rotations, %d failed; done after %s", sent.Load(), failed.Load(), time.Since(now))
}

// writeLeaf issues l from ca and writes base.pem and base-key.pem (the key first, then the
// certificate, each file whole: what a rotation does, not an atomic pair).
func writeLeaf(t *testing.T, ca *auth.DevCA, base string, l auth.Leaf) *x509.Certificate {
	t.Helper()
	c, err := ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, base+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	writeFileAtomic(t, base+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
	return c.Leaf
}

// writeBundle writes the CAs' certificates to path.
func writeBundle(t *testing.T, path string, cas ...*auth.DevCA) {
	t.Helper()
	var b bytes.Buffer
	for _, ca := range cas {
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
	}
	writeFileAtomic(t, path, b.Bytes())
}

// writeFileAtomic replaces path with data by a rename, as a Kubernetes Secret volume does.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// metricValue returns the value of the series that starts with name on url's /metrics; -1
// when absent.
func metricValue(t *testing.T, c *http.Client, url, name string) float64 {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
