package gateway_test

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

// BenchmarkGatewayServeHTTP is one GET through the gateway's handler to an upstream on
// loopback, on a static route with the default transport and metrics: the gateway's own
// time and allocations per forwarded request. Neither end allocates: the client side is a
// ResponseWriter that keeps nothing, the upstream a loop that answers every request on its
// connection with the same bytes. The wrk rounds against Caddy and nginx measure the same
// path over the network (docs/performance.md, docs/performance-log.md).
func BenchmarkGatewayServeHTTP(b *testing.B) {
	upstream := fixedUpstream(b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
	disc, err := discovery.New(discovery.Config{Registries: []string{upstream}}) // never asked: the gateway does not Run
	if err != nil {
		b.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Discovery: disc, Registerer: prometheus.NewRegistry(),
		Static: []routing.StaticRoute{{Path: "/{rest...}", Methods: []string{"GET"}, Upstream: upstream}}})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/items/1", nil)
	req.Header.Set("Accept", "*/*")
	w := &registrytest.CountingWriter{}
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		gw.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// fixedUpstream serves HTTP/1.1 on loopback until the benchmark ends, answering every
// request (headers only: the benchmark's requests have no body) with answer, and returns
// its URL. Its goroutines end with the benchmark: the cleanup closes the listener and every
// connection, and waits for them.
func fixedUpstream(b *testing.B, answer string) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	out := []byte(answer)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	b.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // the listener closed
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return // the connection closed
					}
					if !bytes.Equal(line, []byte("\r\n")) {
						continue
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			})
		}
	})
	return "http://" + l.Addr().String()
}
