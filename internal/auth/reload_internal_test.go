package auth

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// certFiles writes c's chain and key as PEM; returns them as bytes too.
func pemOf(t *testing.T, c tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func caPEM(ca *DevCA) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

type rotation struct {
	t             *testing.T
	dir           string
	cert, key, ca string
	now           time.Time
	ca1           *DevCA
	certs         *ServerCerts
	logs          *bytes.Buffer
}

func newRotation(t *testing.T) *rotation {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	ca, err := NewDevCA(now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &rotation{t: t, dir: dir, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), ca: filepath.Join(dir, "ca.crt"), now: now, ca1: ca, logs: &bytes.Buffer{}}
	r.write(r.issue(ca, time.Hour, 30*24*time.Hour), caPEM(ca))
	r.certs, err = NewServerCerts(ServerCertsConfig{CertFile: r.cert, KeyFile: r.key, ClientCAFile: r.ca, Component: "registry",
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rotation) issue(ca *DevCA, before, after time.Duration) tls.Certificate {
	c, err := ca.Issue(Leaf{Identity: "registry", Hosts: []string{"127.0.0.1"}, Server: true, NotBefore: r.now.Add(-before), NotAfter: r.now.Add(after)})
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *rotation) write(c tls.Certificate, ca []byte) {
	cp, kp := pemOf(r.t, c)
	for f, b := range map[string][]byte{r.cert: cp, r.key: kp, r.ca: ca} {
		if b != nil {
			if err := os.WriteFile(f, b, 0o600); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// TestServerCertificatesRotate: a new certificate and key are taken at the next reload and
// served to new handshakes; a CA rotation with an overlap bundle is taken too.
func TestServerCertificatesRotate(t *testing.T) {
	r := newRotation(t)
	first := r.certs.Leaf().SerialNumber
	if ok, err := r.certs.Reload(); ok || err != nil {
		t.Fatalf("unchanged files reloaded: %v %v", ok, err)
	}
	next := r.issue(r.ca1, time.Minute, 48*time.Hour)
	r.write(next, nil)
	if ok, err := r.certs.Reload(); !ok || err != nil {
		t.Fatalf("a new pair was not taken: %v %v", ok, err)
	}
	if got := served(t, r.certs); got.Cmp(next.Leaf.SerialNumber) != 0 || got.Cmp(first) == 0 {
		t.Errorf("a new handshake got serial %v, want the new %v", got, next.Leaf.SerialNumber)
	}
	ca2, err := NewDevCA(r.now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r.write(r.issue(ca2, time.Minute, 48*time.Hour), append(caPEM(r.ca1), caPEM(ca2)...)) // the overlap bundle
	if ok, err := r.certs.Reload(); !ok || err != nil {
		t.Fatalf("a CA rotation with an overlap bundle was refused: %v %v", ok, err)
	}
	if n := testutil.CollectAndCount(NewCertMetrics("registry", r.certs), "meshflows_certificate_expiry_timestamp_seconds"); n != 2 {
		t.Errorf("expiry series = %d, want the server's and the CAs' (one subject)", n)
	}
}

// served returns the serial of the certificate a new TLS handshake gets.
func served(t *testing.T, s *ServerCerts) *big.Int {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestBadCertificateFilesAreRefused: each bad rewrite is refused with the file named in an
// ERROR log and counted, and the certificate in force keeps serving.
func TestBadCertificateFilesAreRefused(t *testing.T) {
	tests := []struct {
		name    string
		rewrite func(r *rotation)
		want    string
	}{
		{"a half-written certificate", func(r *rotation) {
			cp, _ := pemOf(r.t, r.issue(r.ca1, time.Minute, time.Hour))
			os.WriteFile(r.cert, cp[:len(cp)/2], 0o600)
		}, "tls.crt"},
		{"a chain in the wrong order", func(r *rotation) {
			c := r.issue(r.ca1, time.Minute, time.Hour)
			c.Certificate = [][]byte{r.ca1.Cert.Raw, c.Certificate[0]}
			r.write(c, nil)
		}, "wrong order"},
		{"a key of another certificate", func(r *rotation) {
			cp, _ := pemOf(r.t, r.issue(r.ca1, time.Minute, time.Hour))
			_, kp := pemOf(r.t, r.issue(r.ca1, time.Minute, time.Hour))
			os.WriteFile(r.cert, cp, 0o600)
			os.WriteFile(r.key, kp, 0o600)
		}, "tls.key"},
		{"an expired certificate", func(r *rotation) { r.write(r.issue(r.ca1, 48*time.Hour, -time.Hour), nil) }, "expired"},
		{"a CA bundle without the server's issuer", func(r *rotation) {
			other, err := NewDevCA(r.now.Add(-time.Hour))
			if err != nil {
				r.t.Fatal(err)
			}
			os.WriteFile(r.ca, caPEM(other), 0o600)
		}, "does not hold the issuer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRotation(t)
			before := served(t, r.certs)
			tt.rewrite(r)
			ok, err := r.certs.Reload()
			if ok || err == nil {
				t.Fatalf("Reload = %v, %v: want it refused", ok, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(r.logs.String(), "level=ERROR") {
				t.Errorf("error %q, log %q: want %q named at ERROR", err, r.logs.String(), tt.want)
			}
			if got := served(t, r.certs); got.Cmp(before) != 0 {
				t.Errorf("after a refusal a handshake got serial %v, want the old %v", got, before)
			}
			if ok, err := r.certs.Reload(); ok || err != nil { // the same bad files: said once
				t.Errorf("the same refused files again: %v, %v", ok, err)
			}
			if n := failures(t, NewCertMetrics("registry", r.certs)); n != 1 {
				t.Errorf("failures = %v, want 1", n)
			}
			if n := strings.Count(r.logs.String(), "level=ERROR"); n != 1 {
				t.Errorf("%d ERROR lines, want 1", n)
			}
		})
	}
}

func failures(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "meshflows_certificate_reload_failures_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// TestALifetimeWarningOnceADay: under a quarter of its lifetime left, a WARN; again only a
// day later.
func TestALifetimeWarningOnceADay(t *testing.T) {
	r := newRotation(t)
	r.now = r.now.Add(29 * 24 * time.Hour) // 1 day of 30 left
	r.certs.Reload()
	r.certs.Reload()
	if n := strings.Count(r.logs.String(), "quarter of its lifetime"); n != 1 {
		t.Errorf("%d warnings in the same day, want 1:\n%s", n, r.logs.String())
	}
}
