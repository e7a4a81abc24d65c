package server_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// rawGet sends a GET through a client that leaves Content-Encoding alone (Go's client would
// ask for gzip itself and hide it), with the given headers.
func rawGet(t *testing.T, url string, header ...string) response {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	r := doVia(t, &http.Client{Transport: tr}, http.MethodGet, url, "", header...)
	if n := r.header.Get("Content-Length"); r.status == http.StatusOK && n != fmt.Sprint(len(r.body)) {
		t.Errorf("Content-Length %s for a body of %d bytes", n, len(r.body))
	}
	return r
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

// registerServices registers n instances of the JMS example, each its own service.
func registerServices(t *testing.T, s *registrytest.Server, n int) {
	t.Helper()
	for i := range n {
		body := strings.ReplaceAll(jmsBody, `"egress-jms"`, fmt.Sprintf(`"egress-jms-%d"`, i))
		register(t, s, strings.ReplaceAll(body, "egress-jms-7c9f5d8c4f-9x2kq", fmt.Sprint("jms-", i)))
	}
}

// TestDiscoveryAnswersGzip: a client that accepts gzip gets a large discovery answer
// compressed, the same JSON once decompressed, under the weak form of the same ETag; either
// form of the ETag gets 304; a small answer, or a client that does not accept gzip, gets the
// JSON as it is.
func TestDiscoveryAnswersGzip(t *testing.T) {
	s := registrytest.NewServerWith(t, registry.Config{}, server.Config{GzipMinBytes: 1400}, registrytest.Epoch0)
	one := s.URL + "/v1/discovery/capabilities?capability_id=messaging.publish&service_name=egress-jms-0"
	all := s.URL + "/v1/discovery/capabilities?capability_id=messaging.publish"
	registerServices(t, s, 20)

	plain := rawGet(t, all)
	if plain.status != http.StatusOK || plain.header.Get("Content-Encoding") != "" || len(plain.body) < 1400 {
		t.Fatalf("identity answer: %d, Content-Encoding %q, %d bytes; want 200, none, ≥ 1400 bytes",
			plain.status, plain.header.Get("Content-Encoding"), len(plain.body))
	}
	etag := plain.header.Get("ETag")
	if strings.HasPrefix(etag, "W/") || plain.header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("identity answer: ETag %s, Vary %q; want a strong ETag and Vary: Accept-Encoding", etag, plain.header.Get("Vary"))
	}

	for _, accept := range []string{"gzip", "br, gzip;q=0.8"} {
		t.Run(accept, func(t *testing.T) {
			z := rawGet(t, all, "Accept-Encoding", accept)
			if z.status != http.StatusOK || z.header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("%d, Content-Encoding %q; want 200 gzip", z.status, z.header.Get("Content-Encoding"))
			}
			if len(z.body) >= len(plain.body)/4 {
				t.Errorf("compressed answer is %d bytes of %d", len(z.body), len(plain.body))
			}
			if got := gunzip(t, z.body); !bytes.Equal(got, plain.body) {
				t.Errorf("decompressed answer differs from the identity answer:\n%s\n%s", got, plain.body)
			}
			if got, want := z.header.Get("ETag"), "W/"+etag; got != want {
				t.Errorf("ETag %s, want %s", got, want)
			}
			if z.header.Get("Vary") != "Accept-Encoding" || z.header.Get("X-Registry-Revision") != plain.header.Get("X-Registry-Revision") {
				t.Errorf("headers %v", z.header)
			}
		})
	}

	for _, tc := range []struct {
		name, inm, accept string
	}{
		{"strong tag, identity", etag, ""},
		{"strong tag, gzip", etag, "gzip"},
		{"weak tag, gzip", "W/" + etag, "gzip"},
		{"weak tag, identity", "W/" + etag, ""},
	} {
		t.Run("304/"+tc.name, func(t *testing.T) {
			r := rawGet(t, all, "If-None-Match", tc.inm, "Accept-Encoding", tc.accept)
			if r.status != http.StatusNotModified || len(r.body) != 0 || r.header.Get("Content-Encoding") != "" {
				t.Errorf("%d, %d bytes, Content-Encoding %q; want 304, empty, none", r.status, len(r.body), r.header.Get("Content-Encoding"))
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		r := rawGet(t, all, "Accept-Encoding", "gzip;q=0, identity")
		if r.header.Get("Content-Encoding") != "" || !bytes.Equal(r.body, plain.body) {
			t.Errorf("gzip;q=0 got Content-Encoding %q", r.header.Get("Content-Encoding"))
		}
	})
	t.Run("small answer", func(t *testing.T) {
		r := rawGet(t, one, "Accept-Encoding", "gzip")
		if r.status != http.StatusOK || len(r.body) >= 1400 || r.header.Get("Content-Encoding") != "" || r.header.Get("Vary") != "" {
			t.Errorf("%d, %d bytes, Content-Encoding %q, Vary %q; want 200 as JSON", r.status, len(r.body),
				r.header.Get("Content-Encoding"), r.header.Get("Vary"))
		}
	})
}

// TestGzipThreshold: by default an answer under 64 KiB goes as JSON (on a local network
// decompressing it costs the client more than the bytes saved), one over it compressed; a
// negative threshold never compresses.
func TestGzipThreshold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		min       int64
		instances int
		want      string
	}{
		{"default, small answer", 0, 20, ""},
		{"default, large answer", 0, 160, "gzip"},
		{"never", -1, 160, ""},
		{"low threshold", 1400, 20, "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := registrytest.NewServerWith(t, registry.Config{}, server.Config{GzipMinBytes: tc.min}, registrytest.Epoch0)
			registerServices(t, s, tc.instances)
			url := s.URL + "/v1/discovery/capabilities?capability_id=messaging.publish"
			plain := rawGet(t, url)
			r := rawGet(t, url, "Accept-Encoding", "gzip")
			if got := r.header.Get("Content-Encoding"); got != tc.want {
				t.Fatalf("answer of %d bytes: Content-Encoding %q, want %q", len(plain.body), got, tc.want)
			}
			if tc.want == "gzip" && !bytes.Equal(gunzip(t, r.body), plain.body) {
				t.Error("the decompressed answer differs from the JSON one")
			}
		})
	}
}
