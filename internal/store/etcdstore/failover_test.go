package etcdstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/provider"
	"github.com/meshflows/meshflows/routing"
)

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
	start := func(name string, up *httptest.Server) (stop func() error) {
		return registrytest.RunAgent(t, provider.Config{Registries: registries, HeartbeatInterval: 200 * time.Millisecond,
			DrainTimeout: 5 * time.Second, Registration: registrytest.Orders(name, up.URL)})
	}
	up1, up2 := upstream("orders-1"), upstream("orders-2")
	start("orders-1", up1)
	stop2 := start("orders-2", up2)
	routes := func() (r routing.RoutesAnswer) {
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
	registrytest.Until(t, "both providers in the gateway's table", func() bool { return upstreams() == 2 })
	time.Sleep(1100 * time.Millisecond) // past the gateway TTL: the replicas can know every gateway

	in, err := regB.Instance("orders-2")
	if err != nil {
		t.Fatal(err)
	}
	load := registrytest.StartLoad(edge.URL+"/orders/1", "x", 4)
	registrytest.Until(t, "traffic flowing", func() bool { return load.Sent() > 50 })
	aDown.Store(true) // the replica everyone used goes away
	before := load.Sent()
	registrytest.Until(t, "traffic flowing after the failover", func() bool { return load.Sent() > before+100 })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	up2.Close() // the provider stops serving once its agent returns
	before = load.Sent()
	registrytest.Until(t, "more traffic after the stop", func() bool { return load.Sent() > before+200 })
	load.Stop()
	if n := load.Failed(); n != 0 {
		t.Errorf("%d of %d requests failed across the failover and the drain", n, load.Sent())
	}
	if w, err := regB.Withdrawal("orders-2", in.Generation); err != nil || !w.Acknowledged {
		t.Errorf("the withdrawal through the other replica: %+v %v, want acknowledged", w, err)
	}
	if n := upstreams(); n != 1 {
		t.Errorf("the gateway's table holds %d upstreams, want 1", n)
	}
}
