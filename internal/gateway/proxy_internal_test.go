package gateway

import (
	"log/slog"
	"net/http"
	"testing"
	"time"
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
