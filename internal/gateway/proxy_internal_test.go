package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/endpoint"
)

// TestProxyPoolsCopyBuffers: without a BufferPool, ReverseProxy allocates a 32 KiB buffer
// per request — four fifths of what the gateway allocated under load, and the difference
// between trailing Caddy and leading it.
func TestProxyPoolsCopyBuffers(t *testing.T) {
	p := newProxy(http.DefaultTransport, 1<<20, 10*time.Second, &metrics{}, slog.New(slog.DiscardHandler), time.Now)
	if p.rp.BufferPool == nil {
		t.Fatal("the reverse proxy has no buffer pool")
	}
	b := p.rp.BufferPool.Get()
	if len(b) != 32<<10 {
		t.Errorf("pooled buffer of %d bytes, want 32 KiB", len(b))
	}
	p.rp.BufferPool.Put(b)
}

// TestUpstreamPath: the request path goes under the endpoint's path prefix, joined by
// url.JoinPath: one slash between them, escapes kept, never a query or host of the
// endpoint's text.
func TestUpstreamPath(t *testing.T) {
	tests := []struct {
		endpoint, path, want, wantRaw string
	}{
		{"http://h:1", "/api/x", "/api/x", ""},
		{"http://h:1/", "/api/x", "/api/x", ""},
		{"http://h:1/prefix", "/api/x", "/prefix/api/x", ""},
		{"http://h:1/prefix/", "/api/x/", "/prefix/api/x/", ""},
		{"http://h:1", "/", "/", ""},
		{"http://h:1/prefix", "/", "/prefix/", ""},
		{"http://h:1", "/a b/c%d", "/a b/c%d", ""},
		{"http://h:1", "/a/x%2Fy", "/a/x%2Fy", ""}, // a decoded path as routing matched it
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.endpoint)
		if err != nil {
			t.Fatal(err)
		}
		p, raw := upstreamPath(u, tt.path)
		if p != tt.want || raw != tt.wantRaw {
			t.Errorf("upstreamPath(%s, %q) = %q, %q, want %q, %q", tt.endpoint, tt.path, p, raw, tt.want, tt.wantRaw)
		}
	}
}

// TestTransportRefusesMetadata: the gateway's dialer refuses a link-local address, whatever
// name led to it, unless the policy allows its range.
func TestTransportRefusesMetadata(t *testing.T) {
	if _, err := NewTransport().Dial(context.Background(), "tcp", "169.254.169.254:80"); !errors.Is(err, endpoint.ErrRefused) {
		t.Errorf("dial 169.254.169.254:80 = %v, want ErrRefused", err)
	}
	allow, err := endpoint.ParseAllow([]string{"169.254.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	// A moment to try: the policy's check runs before the connect, so a refusal comes at
	// once; an allowed address gets as far as the connect, and times out (nothing answers).
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := NewTransportFor(allow, 0).Dial(ctx, "tcp", "169.254.169.254:80"); errors.Is(err, endpoint.ErrRefused) {
		t.Errorf("an allowed address was refused: %v", err)
	}
}
