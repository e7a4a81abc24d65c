package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

// TestBodyOverTheLimitIs413: a body over a route's limit — its service's max_body_bytes,
// else the gateway's — is 413 naming the limit, by Content-Length or while a chunked body
// streams, and never reaches the upstream whole; an upstream that answers 413 after reading
// part of a streamed body and closes gets its 413 through, every time, not a 502.
func TestBodyOverTheLimitIs413(t *testing.T) {
	var got atomic.Int64 // bytes the declared-limit upstream read
	declared := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(declared.Close)
	e := newEnvWith(t, registry.Config{}, gateway.Config{MaxBodyBytes: 64 << 20})
	req := apiv1.RegisterRequest{InstanceID: "orders-1", ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: declared.URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: "orders-1", Version: "1.0.0"},
			Capabilities: &apiv1.ManifestCapabilities{MaxBodyBytes: apiv1.Int(1 << 20)},
			Routes:       []apiv1.ManifestRoute{{Path: "/orders/{id}", Methods: []string{"POST"}, Schema: "/openapi.json#/paths/~1orders~1{id}"}}}}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "the route is served", func() bool { return e.do(t, "POST", "/orders/1", "x").status == 200 })
	post := func(url string, body io.Reader, n int64) (int, string) {
		t.Helper()
		r, _ := http.NewRequest("POST", url, body)
		r.ContentLength = n
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	twelve := bytes.Repeat([]byte("x"), 12<<20)
	got.Store(0)
	if status, body := post(e.srv.URL+"/orders/1", bytes.NewReader(twelve), int64(len(twelve))); status != 413 ||
		!strings.Contains(body, "1048576") || !strings.Contains(body, "max_body_bytes") {
		t.Errorf("12 MB with its length = %d %s, want 413 naming 1048576 and max_body_bytes", status, body)
	}
	if status, body := post(e.srv.URL+"/orders/1", io.MultiReader(bytes.NewReader(twelve)), -1); status != 413 || !strings.Contains(body, "1048576") {
		t.Errorf("12 MB chunked = %d %s, want 413 naming 1048576", status, body)
	}
	if n := got.Load(); n >= 1<<20+1 {
		t.Errorf("the upstream read %d bytes of bodies over its limit", n)
	}
	if status, body := post(e.srv.URL+"/orders/1", bytes.NewReader(twelve[:1<<20]), 1<<20); status != 200 || body != "1048576" {
		t.Errorf("a body of exactly the limit = %d %s, want 200", status, body)
	}
	if a := e.do(t, "GET", "/v1/gateway/routes", ""); !strings.Contains(a.body, `"schema":"/openapi.json#/paths/~1orders~1{id}"`) ||
		!strings.Contains(a.body, `"max_body_bytes":1048576`) {
		t.Errorf("the routes table lacks the route's schema or limit: %s", a.body)
	}

	// An upstream with a limit of its own it did not declare: it reads 1 MiB, answers 413 and
	// closes while the gateway still streams the rest.
	early := httptest.NewServer(http.HandlerFunc(takesAMebibyte))
	t.Cleanup(early.Close)
	// And one that closes at once after its answer, with the rest of the body unread: the
	// kernel then resets the connection under the gateway's unfinished write.
	abrupt := "http://" + rawUpstream(t, func(_ int, c net.Conn) {
		answers413AtAMebibyte(c)
		c.Close()
	})
	publish := func(upstream string) routing.StaticRoute {
		return routing.StaticRoute{Path: "/publish", Methods: []string{"POST"}, Upstream: upstream}
	}
	srv := staticGateway(t, gateway.Config{MaxBodyBytes: 64 << 20}, publish(early.URL))
	for i := range 20 {
		if status, body := post(srv.URL+"/publish", bytes.NewReader(twelve), int64(len(twelve))); status != 413 {
			t.Fatalf("try %d: 12 MB to an upstream that stops at 1 MiB = %d %s, want its 413", i, status, body)
		}
	}
	srvAbrupt := staticGateway(t, gateway.Config{MaxBodyBytes: 64 << 20}, publish(abrupt))
	for i := range 20 {
		if status, body := post(srvAbrupt.URL+"/publish", bytes.NewReader(twelve), int64(len(twelve))); status != 413 {
			t.Fatalf("try %d: 12 MB to an upstream that answers 413 at 1 MiB and closes = %d %s, want its 413", i, status, body)
		}
	}
	// The gateway's own default limit applies to a route without a declared one.
	small := staticGateway(t, gateway.Config{MaxBodyBytes: 1000}, publish(early.URL))
	if status, body := post(small.URL+"/publish", strings.NewReader(strings.Repeat("y", 1001)), 1001); status != 413 || !strings.Contains(body, "--max-body-bytes") {
		t.Errorf("1001 bytes over a gateway limit of 1000 = %d %s, want 413 naming --max-body-bytes", status, body)
	}
}

// takesAMebibyte is an upstream with a limit of its own it did not declare: it reads 1 MiB
// of a body and answers 413 past it ("ok" within it).
func takesAMebibyte(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		return
	}
	io.WriteString(w, "ok")
}

// answers413AtAMebibyte reads a request and 1 MiB of its body from c and answers 413 with
// Connection: close; the caller then closes with the rest unread.
func answers413AtAMebibyte(c io.ReadWriter) {
	br := bufio.NewReader(c)
	if _, err := http.ReadRequest(br); err == nil {
		io.CopyN(io.Discard, br, 1<<20)
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/plain\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
	}
}

// TestSilentUpstreamIs504: an upstream that accepts the connection and the request and never
// answers is 504 after the upstream timeout, not 502 — for a GET on the pooled path and a
// POST with a body alike.
func TestSilentUpstreamIs504(t *testing.T) {
	silent := "http://" + rawUpstream(t, func(_ int, c net.Conn) { io.Copy(io.Discard, c) }) // reads everything, answers nothing
	srv := staticGateway(t, gateway.Config{UpstreamTimeout: 200 * time.Millisecond},
		routing.StaticRoute{Path: "/silent", Methods: []string{"GET", "POST"}, Upstream: silent})
	for _, method := range []string{"GET", "POST"} {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("x")
		}
		req, _ := http.NewRequest(method, srv.URL+"/silent", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("%s to a silent upstream = %d, want 504", method, resp.StatusCode)
		}
	}
}

// staticGateway serves a gateway with cfg and only the static routes given: no registry is
// ever asked (its Discovery points nowhere), no outcomes are reported, no path is granted.
func staticGateway(t *testing.T, cfg gateway.Config, routes ...routing.StaticRoute) *httptest.Server {
	t.Helper()
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Discovery, cfg.OutcomeWindow, cfg.Static = disc, -1, routes
	cfg.Policy = func() routing.Policy { return nil }
	_, srv := serveGateway(t, cfg, false)
	return srv
}

// TestEarly413OverHTTPS: the early answer holds over an https upstream too. An upstream that
// reads 1 MiB of a 12 MB body, answers 413 and closes — gracefully, or at once with the rest
// unread, so that its kernel resets the connection under the gateway's unfinished write —
// gets its 413 through every time, not a 502.
func TestEarly413OverHTTPS(t *testing.T) {
	early := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("all") { // it takes anything
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		takesAMebibyte(w, r)
	}))
	t.Cleanup(early.Close)
	abrupt := "https://" + rawUpstream(t, func(_ int, c net.Conn) {
		answers413AtAMebibyte(tls.Server(c, &tls.Config{Certificates: early.TLS.Certificates}))
		c.Close()
	})
	trusting := func() *gateway.Transport { // the upstreams' certificate trusted, as an operator's CA would be
		tr := gateway.NewTransport()
		tr.Fallback.(*http.Transport).TLSClientConfig = early.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		return tr
	}
	twelve := bytes.Repeat([]byte("x"), 12<<20)
	// an upstream whose certificate the gateway does not trust is refused on this path too
	untrusted := staticGateway(t, gateway.Config{MaxBodyBytes: 64 << 20}, routing.StaticRoute{Path: "/publish", Methods: []string{"POST"}, Upstream: early.URL})
	if resp, err := http.Post(untrusted.URL+"/publish", "application/octet-stream", bytes.NewReader(twelve)); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 502 || !strings.Contains(string(b), "TLS handshake") {
			t.Errorf("an untrusted upstream = %d %s, want 502 naming the TLS handshake", resp.StatusCode, b)
		}
	}
	for _, upstream := range []string{early.URL, abrupt} {
		srv := staticGateway(t, gateway.Config{MaxBodyBytes: 64 << 20, Transport: trusting()},
			routing.StaticRoute{Path: "/publish", Methods: []string{"POST"}, Upstream: upstream})
		for i := range 20 {
			resp, err := http.Post(srv.URL+"/publish", "application/octet-stream", bytes.NewReader(twelve))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 413 {
				t.Fatalf("%s, try %d: 12 MB = %d %s, want the upstream's 413", upstream, i, resp.StatusCode, b)
			}
		}
		if upstream != early.URL {
			continue
		}
		// a streamed body it takes goes through on the same path, whole
		resp, err := http.Post(srv.URL+"/publish?all", "application/octet-stream", bytes.NewReader(twelve))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != fmt.Sprint(len(twelve)) {
			t.Errorf("12 MB streamed over https = %d %s, want 200 and every byte", resp.StatusCode, b)
		}
	}
}
