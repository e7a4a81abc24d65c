package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// transportSetup is a registry served plain, or over mTLS with RBAC and an audit log to a
// file, with 1,000 instances registered by the identity "bench".
type transportSetup struct {
	url    string
	client func(keepAlive bool) *http.Client
	gens   []int64
}

func newTransportSetup(b *testing.B, secure bool) *transportSetup {
	b.Helper()
	reg, _ := registry.New(memstore.New(nil), registry.Config{})
	cfg := server.Config{}
	var tlsCfg *tls.Config
	var clientTLS *tls.Config
	if secure {
		now := time.Now()
		ca, _ := auth.NewDevCA(now)
		srvCert, _ := ca.Issue(auth.Leaf{Identity: "registry", Hosts: []string{"127.0.0.1"}, Server: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
		cliCert, _ := ca.Issue(auth.Leaf{Identity: "bench", TrustDomain: auth.DefaultTrustDomain, Client: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
		dir := b.TempDir()
		rbac := filepath.Join(dir, "rbac.yaml")
		os.WriteFile(rbac, []byte("identities: {bench: [p]}\nroles: {p: {capabilities: ['**'], discover: true}}\n"), 0o600)
		policy, err := auth.LoadPolicyFile(rbac, nil)
		if err != nil {
			b.Fatal(err)
		}
		f, _ := os.Create(filepath.Join(dir, "audit.jsonl"))
		b.Cleanup(func() { f.Close() })
		bw := telemetry.NewBufferedWriter(f)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { bw.Run(ctx, 100*time.Millisecond); close(done) }()
		b.Cleanup(func() { cancel(); <-done })
		cfg = server.Config{Authenticator: &auth.Authenticator{}, Policy: policy, Audit: auth.NewAuditLog(bw)}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
		clientTLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliCert}}
	}
	srv, err := server.New(reg, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	if secure {
		ts.TLS = tlsCfg
		ts.StartTLS()
	} else {
		ts.Start()
	}
	b.Cleanup(ts.Close)
	s := &transportSetup{url: ts.URL, client: func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 64}}
	}}
	c := s.client(true)
	for i := range 1000 {
		body := fmt.Sprintf(`{"instance_id":"inst-%d","service_name":"bench","service_version":"1.0.0","endpoint":"http://127.0.0.1:9000",
"capabilities":[{"capability_id":"bench.read","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p"}]}`, i)
		resp, err := c.Post(ts.URL+"/v1/services/register", "application/json", bytes.NewReader([]byte(body)))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("register: %v %v", err, resp)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s.gens = append(s.gens, int64(i+1))
	}
	return s
}

// BenchmarkHeartbeatTransport compares heartbeats over keep-alive connections: plain HTTP
// against mTLS with RBAC and the audit log on. Compare the two ns/op of one run.
func BenchmarkHeartbeatTransport(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "mtls+rbac+audit"
		}
		b.Run(name, func(b *testing.B) {
			s := newTransportSetup(b, secure)
			c := s.client(true)
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1)) % len(s.gens)
					req, _ := http.NewRequest("PUT", s.url+"/v1/services/inst-"+strconv.Itoa(i)+"/heartbeat",
						bytes.NewReader([]byte(`{"generation":`+strconv.FormatInt(s.gens[i], 10)+`}`)))
					resp, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkNewConnection measures a request on a new connection each time: the cost of
// the TCP (and, secured, the mTLS) handshake.
func BenchmarkNewConnection(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "mtls"
		}
		b.Run(name, func(b *testing.B) {
			s := newTransportSetup(b, secure)
			c := s.client(false)
			b.ResetTimer()
			for b.Loop() {
				resp, err := c.Get(s.url + "/v1/discovery/health")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
