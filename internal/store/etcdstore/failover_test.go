package etcdstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/provider"
	"github.com/meshflows/meshflows/routing"
)

// syncBuffer is a bytes.Buffer an agent's logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestDrainAcrossAReplicaFailover: a gateway and two providers use two registry replicas over
// etcd. The replica they talk to goes away; they fail over to the other. One provider then
// stops under traffic: its withdrawal is acknowledged through the other replica only once the
// gateway's table no longer holds it (the acknowledgements live in etcd, and the revisions of
// both replicas number one history, so the gateway follows the second at once). No request
// may fail.
func TestDrainAcrossAReplicaFailover(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/failover%d/", prefixes.Add(1))
	gatewayTTL := func(c *registry.Config) { c.GatewayTTL = time.Second }
	serve := func(reg *registry.Registry) *httptest.Server {
		srv, err := server.New(reg, server.Config{})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		return hs
	}
	regA, _ := startReplica(t, cli, prefix, "a", gatewayTTL)
	regB, _ := startReplica(t, cli, prefix, "b", gatewayTTL)
	var aDown atomic.Bool
	a := serve(regA)
	frontA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if aDown.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		a.Config.Handler.ServeHTTP(w, r)
	}))
	defer frontA.Close()
	b := serve(regB)
	registries := []string{frontA.URL, b.URL}

	disc, err := discovery.New(discovery.Config{Registries: registries, WatchWait: 200 * time.Millisecond, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Discovery: disc, AckInterval: 50 * time.Millisecond, OutcomeWindow: -1, PolicyCheck: time.Hour,
		Policy: func() routing.Policy { return routing.Policy{"orders": {"/orders"}} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gwDone := make(chan error, 1)
	go func() { gwDone <- gw.Run(ctx) }()
	defer func() { cancel(); <-gwDone }()
	edge := httptest.NewServer(gw)
	defer edge.Close()

	upstream := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, name)
		}))
		t.Cleanup(s.Close)
		return s
	}
	var logs syncBuffer
	start := func(name string, up *httptest.Server) (stop func() error) {
		ag, err := provider.New(provider.Config{Registries: registries, HeartbeatInterval: 200 * time.Millisecond, DrainTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Registration: apiv1.RegisterRequest{InstanceID: name, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: up.URL,
				Capabilities: []apiv1.Capability{{CapabilityID: "orders.write", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
				Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: name, Version: "1.0.0"},
					Routes: []apiv1.ManifestRoute{{Path: "/orders/{id}", Methods: []string{"POST"}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ag.Run(ctx) }()
		return sync.OnceValue(func() error { cancel(); return <-done })
	}
	up1, up2 := upstream("orders-1"), upstream("orders-2")
	stop1 := start("orders-1", up1)
	defer stop1()
	stop2 := start("orders-2", up2)
	defer stop2()
	routes := func() (r gateway.RoutesAnswer) {
		resp, err := http.Get(edge.URL + "/v1/gateway/routes")
		if err == nil {
			defer resp.Body.Close()
			json.NewDecoder(resp.Body).Decode(&r)
		}
		return r
	}
	upstreams := func() int {
		for _, rt := range routes().Routes {
			if rt.Pattern == "/orders/{id}" {
				return len(rt.Instances)
			}
		}
		return 0
	}
	eventually(t, "both providers in the gateway's table", func() bool { return upstreams() == 2 })
	time.Sleep(1100 * time.Millisecond) // past the gateway TTL: the replicas can know every gateway

	var sent, failed atomic.Int64
	tctx, stopTraffic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for tctx.Err() == nil {
				resp, err := http.Post(edge.URL+"/orders/1", "text/plain", strings.NewReader("x"))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	eventually(t, "traffic flowing", func() bool { return sent.Load() > 50 })
	aDown.Store(true) // the replica everyone used goes away
	before := sent.Load()
	eventually(t, "traffic flowing after the failover", func() bool { return sent.Load() > before+100 })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	up2.Close() // the provider stops serving once its agent returns
	before = sent.Load()
	eventually(t, "more traffic after the stop", func() bool { return sent.Load() > before+200 })
	stopTraffic()
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across the failover and the drain", n, sent.Load())
	}
	if !strings.Contains(logs.String(), "withdrawal acknowledged by every gateway") {
		t.Errorf("the withdrawal was not acknowledged through the other replica:\n%s", logs.String())
	}
	if n := upstreams(); n != 1 {
		t.Errorf("the gateway's table holds %d upstreams, want 1", n)
	}
}
