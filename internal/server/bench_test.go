package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// benchBody is the registration of instance i: 100 instances per service, three capabilities.
func benchBody(i int) []byte {
	return fmt.Appendf(nil, `{"instance_id":"inst-%d","service_name":"svc-%d","service_version":"1.4.2","endpoint":"http://127.0.0.1:%d","zone":"a",
"capabilities":[{"capability_id":"orders.read","capability_version":"2.0.0","contract_schema_version":"1.0","provider":"grpc","metadata":{"owner":"team-a","build":"1234"}},
{"capability_id":"orders.http","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"http","metadata":{"path":"/v1/orders"}},
{"capability_id":"audit.write","capability_version":"1.3.0","contract_schema_version":"1.0","provider":"kafka"}]}`, i, i/100, 10000+i%50000)
}

// serve runs one request through the handler, without a network.
func serve(b *testing.B, h http.Handler, method, target string, body []byte, want int, header ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	h.ServeHTTP(w, r)
	if w.Code != want {
		b.Fatalf("%s %s = %d %s", method, target, w.Code, w.Body)
	}
	return w
}

// filled is a server with scfg's settings holding n registered instances, and their bodies.
func filled(b *testing.B, n int, scfg server.Config) (*registrytest.Server, [][]byte) {
	s := registrytest.NewServerWith(b, registry.Config{}, scfg, registrytest.Epoch0)
	bodies := make([][]byte, n)
	for i := range n {
		bodies[i] = benchBody(i)
		serve(b, s.Config.Handler, "POST", "/v1/services/register", bodies[i], 200)
	}
	return s, bodies
}

func BenchmarkHTTPRegister(b *testing.B) {
	for _, n := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			s, bodies := filled(b, n, server.Config{})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				serve(b, s.Config.Handler, "POST", "/v1/services/register", bodies[i%n], 200)
				i++
			}
		})
	}
}

func BenchmarkHTTPHeartbeat(b *testing.B) {
	for _, n := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			s, _ := filled(b, n, server.Config{})
			paths, bodies := make([]string, n), make([][]byte, n)
			for i := range n {
				paths[i] = "/v1/services/inst-" + strconv.Itoa(i) + "/heartbeat"
				bodies[i] = []byte(`{"generation":` + strconv.Itoa(i+1) + `,"health":"ok"}`)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				serve(b, s.Config.Handler, "PUT", paths[i%n], bodies[i%n], 200)
				i++
			}
		})
	}
}

func BenchmarkHTTPQuery(b *testing.B) {
	for _, n := range []int{1000, 60000} {
		// the 100-instance answer (39 KB) is under the default gzip threshold: lowered here so
		// that the gzip cases measure compression
		s, _ := filled(b, n, server.Config{GzipMinBytes: 1024})
		target := "/v1/discovery/capabilities?capability_id=orders.read&service_name=svc-3"
		b.Run(fmt.Sprintf("instances=%d/cached", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serve(b, s.Config.Handler, "GET", target, nil, 200)
			}
		})
		// the answer a client that accepts gzip gets: compressed once, then a lookup and a
		// write of about a twentieth of the bytes
		b.Run(fmt.Sprintf("instances=%d/cached/gzip", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := serve(b, s.Config.Handler, "GET", target, nil, 200, "Accept-Encoding", "gzip")
				b.ReportMetric(float64(w.Body.Len()), "answer-bytes")
			}
		})
		// every answer after a change: the query and the encoding (and the compression) are
		// paid each time
		for _, accept := range []string{"", "gzip"} {
			name := fmt.Sprintf("instances=%d/after-change", n)
			if accept != "" {
				name += "/" + accept
			}
			b.Run(name, func(b *testing.B) { servedAfterChange(b, s.Config.Handler, n, target, "Accept-Encoding", accept) })
		}
	}
}

// BenchmarkCatalogListing lists the catalog of 20,000 instances whole, and in pages of 1,000
// (the first page of a new revision builds the listing; the others are cut from it): the
// bytes each answer holds, and the time to the whole listing either way; and what the first
// page of a new revision costs, its listing built.
func BenchmarkCatalogListing(b *testing.B) {
	const n = 20000
	s, _ := filled(b, n, server.Config{})
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := serve(b, s.Config.Handler, "GET", "/v1/services", nil, 200)
			b.ReportMetric(float64(w.Body.Len()), "answer-bytes")
		}
	})
	b.Run("whole-discarded", func(b *testing.B) { // what the server takes, not the recorder
		b.ReportAllocs()
		for b.Loop() {
			w := &registrytest.CountingWriter{}
			s.Config.Handler.ServeHTTP(w, httptest.NewRequest("GET", "/v1/services", nil))
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
			b.ReportMetric(float64(w.Bytes), "answer-bytes")
		}
	})
	b.Run("pages-of-1000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			target, pages, largest := "/v1/services?limit=1000", 0, 0
			for target != "" {
				w := serve(b, s.Config.Handler, "GET", target, nil, 200)
				pages, largest = pages+1, max(largest, w.Body.Len())
				target = ""
				if _, tok, ok := bytes.Cut(w.Body.Bytes(), []byte(`"next_page_token":"`)); ok { // the last field: no decode of the page
					tok, _, _ = bytes.Cut(tok, []byte(`"`))
					target = "/v1/services?limit=1000&page_token=" + url.QueryEscape(string(tok))
				}
			}
			if pages != n/1000 {
				b.Fatalf("%d pages", pages)
			}
			b.ReportMetric(float64(largest), "answer-bytes")
		}
	})
	b.Run("first-page-of-a-new-revision", func(b *testing.B) { // the listing built, and held
		servedAfterChange(b, s.Config.Handler, n, "/v1/services?limit=1000")
	})
}

// BenchmarkDiscoveryPages is the first page of 1,000 of the unfiltered answer (every
// instance in or out of rotation, three entries each) of 20,000 instances at a new revision:
// its listing built, and held for the pages after it.
func BenchmarkDiscoveryPages(b *testing.B) {
	const n = 20000
	s, _ := filled(b, n, server.Config{})
	servedAfterChange(b, s.Config.Handler, n, "/v1/discovery/capabilities?include=all&limit=1000")
}

// servedAfterChange times GET target, each answered after a registration (not timed) moved
// the registry of n instances to a new revision.
func servedAfterChange(b *testing.B, h http.Handler, n int, target string, header ...string) {
	body := benchBody(n + 1)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		serve(b, h, "POST", "/v1/services/register", body, 200)
		b.StartTimer()
		serve(b, h, "GET", target, nil, 200, header...)
	}
}
