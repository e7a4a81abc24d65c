package client_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshflows/meshflows/client"
)

// testCA is a CA for the tests: its certificate and key.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serials = struct {
	sync.Mutex
	n int64
}{n: 100}

func nextSerial() *big.Int {
	serials.Lock()
	defer serials.Unlock()
	serials.n++
	return big.NewInt(serials.n)
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

// issue returns the PEM certificate and key of a leaf for cn (valid from notBefore to
// notAfter), a server certificate for 127.0.0.1 when server.
func (ca *testCA) issue(t *testing.T, cn string, server bool, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, leaf *x509.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	leaf, _ = x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), leaf
}

func bundle(cas ...*testCA) []byte {
	var b bytes.Buffer
	for _, ca := range cas {
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	}
	return b.Bytes()
}

// mtlsServer is an HTTPS server that wants a client certificate of any of cas and answers
// the serial of the one it got; its server certificate can be replaced.
type mtlsServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	cert tls.Certificate
	pool *x509.CertPool
}

func newMTLSServer(t *testing.T, ca *testCA, clientCAs ...*testCA) *mtlsServer {
	t.Helper()
	s := &mtlsServer{}
	s.setCert(t, ca)
	s.pool = x509.NewCertPool()
	for _, c := range clientCAs {
		s.pool.AddCert(c.cert)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.TLS.PeerCertificates[0].SerialNumber.String()))
	}))
	s.srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
	}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *mtlsServer) setCert(t *testing.T, ca *testCA) {
	c, k, _ := ca.issue(t, "server", true, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.cert = pair
	s.mu.Unlock()
}

// files is a CA bundle, a certificate and a key in a directory.
type files struct{ ca, cert, key string }

func writeFiles(t *testing.T, dir string, ca, cert, key []byte) files {
	t.Helper()
	f := files{filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")}
	for path, data := range map[string][]byte{f.ca: ca, f.cert: cert, f.key: key} {
		if data == nil {
			continue
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String(), nil
}

// TestTLSFilesRotateTheClientCertificateAndTheCA: a rewritten client certificate is what the
// next connection presents (idle ones are closed on reload); a CA bundle with a new CA beside
// the old lets a server move to a certificate of the new CA without a failed request.
func TestTLSFilesRotateTheClientCertificateAndTheCA(t *testing.T) {
	ca1 := newTestCA(t, "ca one")
	ca2 := newTestCA(t, "ca two")
	srv := newMTLSServer(t, ca1, ca1, ca2)
	dir := t.TempDir()
	c1, k1, leaf1 := ca1.issue(t, "agent", false, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	f := writeFiles(t, dir, bundle(ca1), c1, k1)
	tf, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key})
	if err != nil {
		t.Fatal(err)
	}
	hc := tf.HTTPClient()
	if got, err := get(t, hc, srv.srv.URL); err != nil || got != leaf1.SerialNumber.String() {
		t.Fatalf("first request presented %q (%v), want serial %s", got, err, leaf1.SerialNumber)
	}
	c2, k2, leaf2 := ca2.issue(t, "agent", false, time.Now().Add(-time.Minute), time.Now().Add(2*time.Hour))
	writeFiles(t, dir, bundle(ca1, ca2), c2, k2)
	if ok, err := tf.Reload(); !ok || err != nil {
		t.Fatalf("Reload = %v, %v", ok, err)
	}
	if got, err := get(t, hc, srv.srv.URL); err != nil || got != leaf2.SerialNumber.String() {
		t.Errorf("after the rotation the request presented %q (%v), want the new serial %s", got, err, leaf2.SerialNumber)
	}
	srv.setCert(t, ca2) // the server moves to the new CA: the bundle in force trusts it
	hc.CloseIdleConnections()
	if _, err := get(t, hc, srv.srv.URL); err != nil {
		t.Errorf("a server certificate of the new CA in the overlap: %v", err)
	}
	writeFiles(t, dir, bundle(ca1), nil, nil) // the new CA dropped again: its server is refused
	tf.Reload()
	hc.CloseIdleConnections()
	if _, err := get(t, hc, srv.srv.URL); err == nil {
		t.Error("a server certificate of a CA no longer in the bundle was accepted")
	}
	var roles []string
	for _, c := range tf.Certificates() {
		roles = append(roles, c.Role+" "+c.Subject)
	}
	if got := strings.Join(roles, ", "); got != "client CN=agent, ca CN=ca one" {
		t.Errorf("Certificates() = %s", got)
	}
}

// TestTLSFilesRefuseBadSets: a half-written certificate, a key of another certificate, an
// expired certificate and a CA bundle without a certificate are refused once each (logged,
// counted), the set in force staying; a missing client certificate pair is an error at start.
func TestTLSFilesRefuseBadSets(t *testing.T) {
	ca := newTestCA(t, "ca")
	now := time.Now()
	good, goodKey, leaf := ca.issue(t, "agent", false, now.Add(-time.Minute), now.Add(time.Hour))
	other, _, _ := ca.issue(t, "other", false, now.Add(-time.Minute), now.Add(time.Hour))
	expired, expiredKey, _ := ca.issue(t, "agent", false, now.Add(-2*time.Hour), now.Add(-time.Hour))
	for _, c := range []struct {
		name          string
		ca, cert, key []byte
		want          string
	}{
		{"half-written certificate", nil, good[:len(good)/2], goodKey, "half-written"},
		{"a key of another certificate", nil, other, goodKey, "key of another certificate"},
		{"an expired certificate", nil, expired, expiredKey, "expired at"},
		{"a CA bundle without a certificate", []byte("-----BEGIN NOTHING-----\n"), nil, nil, "holds no PEM certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := writeFiles(t, dir, bundle(ca), good, goodKey)
			var logs bytes.Buffer
			tf, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			writeFiles(t, dir, c.ca, c.cert, c.key)
			ok, err := tf.Reload()
			if ok || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Reload = %v, %v; want a refusal saying %q", ok, err, c.want)
			}
			if ok, err := tf.Reload(); ok || err != nil {
				t.Errorf("the same bad files again: %v, %v; want nothing said again", ok, err)
			}
			if tf.ReloadFailures() != 1 || strings.Count(logs.String(), "refused") != 1 {
				t.Errorf("%d failures counted, logs:\n%s", tf.ReloadFailures(), logs.String())
			}
			if tf.Leaf().SerialNumber.Cmp(leaf.SerialNumber) != 0 {
				t.Error("the certificate in force changed")
			}
		})
	}
	if _, err := client.NewTLSFiles(client.TLSFilesConfig{CertFile: "x.pem"}); err == nil {
		t.Error("a certificate without its key was accepted")
	}
}

// A provider or a consumer whose certificate files are rewritten by cert-manager or
// spiffe-helper: TLSFiles reads them again every interval, new connections use what it
// read last.
func ExampleTLSFiles() {
	files, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: "/etc/meshflows/tls/ca.crt",
		CertFile: "/etc/meshflows/tls/tls.crt", KeyFile: "/etc/meshflows/tls/tls.key"})
	if err != nil {
		return // the first load must succeed: a missing or bad file is an error here
	}
	// go files.Run(ctx, client.DefaultTLSReloadInterval) in the program's errgroup
	c, err := client.New(client.Config{Registries: []string{"https://meshflows-registry:7400"}, HTTPClient: files.HTTPClient()})
	_, _ = c, err // or provider.Config{Client: files.HTTPClient()}, discovery.Config{Client: …}
}
