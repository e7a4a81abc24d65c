package registrytest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/provider"
)

// Load sends a steady stream of POSTs to one URL from a few workers — the traffic of the drain
// tests, through a gateway — and counts what failed: a transport error or any status but 200.
// POSTs are never retried by a gateway, so every request that reaches a stopped provider
// counts. It stops when Stop is called.
type Load struct {
	sent, failed atomic.Int64
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// StartLoad starts workers goroutines posting body to url.
func StartLoad(url, body string, workers int) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel}
	for range workers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				l.sent.Add(1)
				resp, err := http.Post(url, "text/plain", strings.NewReader(body))
				if err != nil {
					l.failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					l.failed.Add(1)
				}
			}
		})
	}
	return l
}

// Sent returns how many requests were sent so far.
func (l *Load) Sent() int64 { return l.sent.Load() }

// Failed returns how many of them failed.
func (l *Load) Failed() int64 { return l.failed.Load() }

// Stop ends the load and waits for its workers.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Orders is the registration of the drain tests' provider: instance name of service
// "orders", capability orders.write, and one route, POST /orders/{id}, served at endpoint.
func Orders(name, endpoint string) apiv1.RegisterRequest {
	return apiv1.RegisterRequest{InstanceID: name, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: endpoint,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.write", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: name, Version: "1.0.0"},
			Routes: []apiv1.ManifestRoute{{Path: "/orders/{id}", Methods: []string{"POST"}}}}}
}

// RunAgent runs a provider agent with cfg until stop is called (once; the test's end calls
// it too). stop returns what Run returned: after the deregistration and the drain wait.
func RunAgent(t testing.TB, cfg provider.Config) (stop func() error) {
	t.Helper()
	a, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	return stop
}

// SyncBuffer is a bytes.Buffer that a logger and a test may share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CountingWriter is an http.ResponseWriter for benchmarks of handlers: it keeps the status
// and how many bytes of body came, and drops the bytes, so that what a benchmark counts is
// the handler's (httptest.ResponseRecorder keeps the body, and allocates for it). Reset
// readies it for the next request.
type CountingWriter struct {
	Code   int // the status written first, 0 before any
	Bytes  int // the body's bytes so far
	header http.Header
}

// Header returns the answer's header map.
func (w *CountingWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

// WriteHeader keeps the first status written.
func (w *CountingWriter) WriteHeader(code int) {
	if w.Code == 0 {
		w.Code = code
	}
}

// Write counts p; a body without a status written first is a 200.
func (w *CountingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.Bytes += len(p)
	return len(p), nil
}

// Reset empties the writer, keeping its header map for reuse.
func (w *CountingWriter) Reset() {
	clear(w.header)
	w.Code, w.Bytes = 0, 0
}
