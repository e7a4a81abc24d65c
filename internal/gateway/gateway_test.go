package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/provider"
	"github.com/meshflows/meshflows/routing"
)

// switchable serves the registry, or 503 while it is "down"; swap puts another registry
// behind it (a restart).
type switchable struct {
	h    atomic.Pointer[http.Handler]
	down atomic.Bool
}

func newSwitchable(h http.Handler) *switchable {
	s := &switchable{}
	s.swap(h)
	return s
}

func (s *switchable) swap(h http.Handler) { s.h.Store(&h) }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	(*s.h.Load()).ServeHTTP(w, r)
}

type env struct {
	reg   *registrytest.Server
	front *switchable
	gw    *gateway.Gateway
	srv   *httptest.Server
	prom  *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, registry.Config{}, gateway.Config{})
}

// newEnvWith is newEnv with the registry's and the gateway's settings (the gateway's
// Discovery, Registerer, Static and Policy are the env's own).
func newEnvWith(t *testing.T, rcfg registry.Config, gcfg gateway.Config, dopts ...func(*discovery.Config)) *env {
	t.Helper()
	reg := registrytest.NewServer(t, rcfg)
	reg.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: answers are complete, withdrawals apply
	front := newSwitchable(reg.Config.Handler)
	fs := httptest.NewServer(front)
	t.Cleanup(fs.Close)
	dcfg := discovery.Config{Registries: []string{fs.URL}, WatchWait: 200 * time.Millisecond, RequestTimeout: time.Second}
	for _, o := range dopts {
		o(&dcfg)
	}
	disc, err := discovery.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	gcfg.Discovery, gcfg.Registerer = disc, prom
	gcfg.Static = []routing.StaticRoute{{Path: "/static/{rest...}", Methods: []string{"GET"}, Upstream: upstream(t, "static").URL}}
	gcfg.Policy = func() routing.Policy { return routing.Policy{"orders": {"/orders"}} }
	gcfg.PolicyCheck = time.Hour
	gw, srv := serveGateway(t, gcfg, true)
	return &env{reg: reg, front: front, gw: gw, srv: srv, prom: prom}
}

// serveGateway builds a gateway with cfg and serves it until the test ends; with run, its
// Run loop runs too (without, only what New derives: the static table).
func serveGateway(t *testing.T, cfg gateway.Config, run bool) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- gw.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return gw, srv
}

// upstream is a backend that answers with its name, the path it got and X-Forwarded-For.
func upstream(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s %s", name, r.URL.Path, r.Header.Get("X-Forwarded-For"), body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (e *env) register(t *testing.T, id, endpoint string, routes ...apiv1.ManifestRoute) {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: endpoint,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest:     &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: id, Version: "1.0.0"}, Routes: routes}}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
}

var ordersRoutes = []apiv1.ManifestRoute{
	{Path: "/orders/{id}", Methods: []string{"GET", "POST"}, Idempotent: []string{"GET"}},
}

type answer struct {
	status int
	body   string
	header http.Header
}

func (e *env) do(t *testing.T, method, path, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

func TestRoutesFollowTheRegistry(t *testing.T) {
	e := newEnv(t)
	a := upstream(t, "a")
	e.register(t, "orders-a", a.URL, ordersRoutes...)
	registrytest.Until(t, "the new provider's route is served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	got := e.do(t, "GET", "//orders/./7/", "")
	if !strings.HasPrefix(got.body, "a /orders/7 127.0.0.1") || got.header.Get("X-Cache-Source") != "fresh" {
		t.Errorf("GET //orders/./7/ = %d %q %v", got.status, got.body, got.header)
	}
	if got := e.do(t, "GET", "/static/x/y", ""); got.status != 200 || !strings.HasPrefix(got.body, "static /static/x/y") {
		t.Errorf("static route = %d %q", got.status, got.body)
	}
	if got := e.do(t, "PUT", "/orders/7", ""); got.status != 405 || got.header.Get("Allow") != "GET, POST" || !strings.Contains(got.body, "METHOD_NOT_ALLOWED") {
		t.Errorf("PUT = %d %q Allow %q", got.status, got.body, got.header.Get("Allow"))
	}
	if got := e.do(t, "GET", "/nothing", ""); got.status != 404 || !strings.Contains(got.body, "NOT_FOUND") {
		t.Errorf("unknown path = %d %q", got.status, got.body)
	}
	// the table explains itself
	var routes routing.RoutesAnswer
	json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &routes)
	if len(routes.Routes) != 3 || routes.Source != string(discovery.SourceFresh) || routes.RegistryRevision != 1 {
		t.Errorf("routes = %+v", routes)
	}
	// deregistration withdraws the route: a route whose last upstream went away is 503 with
	// Retry-After (it is coming back, or its clients should back off), not 404 (never was)
	if err := e.reg.Registry.Deregister(context.Background(), "orders-a", 0); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "the route is withdrawn", func() bool {
		var r routing.RoutesAnswer
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return len(r.Routes) == 1 // the static one
	})
	if got := e.do(t, "GET", "/orders/1", ""); got.status != 503 || got.header.Get("Retry-After") == "" || !strings.Contains(got.body, "no upstream left") {
		t.Errorf("a route whose last upstream went away = %d %q Retry-After %q, want 503 with Retry-After", got.status, got.body, got.header.Get("Retry-After"))
	}
	if got := e.do(t, "GET", "/nothing", ""); got.status != 404 {
		t.Errorf("a path no route ever had = %d, want 404", got.status)
	}
}

func TestLastKnownGoodDuringAnOutage(t *testing.T) {
	e := newEnv(t)
	a := upstream(t, "a")
	e.register(t, "orders-a", a.URL, ordersRoutes...)
	registrytest.Until(t, "served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	e.front.down.Store(true)
	registrytest.Until(t, "the gateway notices the outage", func() bool {
		return e.do(t, "GET", "/orders/1", "").header.Get("X-Cache-Source") == "snapshot"
	})
	for range 20 {
		got := e.do(t, "GET", "/orders/1", "")
		if got.status != 200 || got.header.Get("X-Cache-Source") != "snapshot" || got.header.Get("X-Route-Table-Age") == "" {
			t.Fatalf("during the outage: %d %q %v", got.status, got.body, got.header)
		}
	}
	// an invalidation during the outage keeps the table
	if got := e.do(t, "DELETE", "/v1/discovery/invalidate", ""); got.status != 503 {
		t.Errorf("invalidate during the outage = %d", got.status)
	}
	if got := e.do(t, "GET", "/orders/1", ""); got.status != 200 {
		t.Errorf("after a failed invalidation: %d", got.status)
	}
	e.front.down.Store(false)
	registrytest.Until(t, "fresh again", func() bool { return e.do(t, "GET", "/orders/1", "").header.Get("X-Cache-Source") == "fresh" })
	if got := e.do(t, "DELETE", "/v1/discovery/invalidate", ""); got.status != 200 {
		t.Errorf("invalidate = %d %s", got.status, got.body)
	}
}

func counter(t *testing.T, g prometheus.Gatherer, name string) prometheus.Collector {
	mfs, _ := g.Gather()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
	for _, mf := range mfs {
		if mf.GetName() == name {
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return c
}

// TestTableSwapUnderLoad registers and deregisters instances while clients send requests:
// with -race, every swap must be safe, and every answer a route's or a clean 404.
func TestTableSwapUnderLoad(t *testing.T) {
	e := newEnv(t)
	a := upstream(t, "a")
	e.register(t, "orders-a", a.URL, ordersRoutes...)
	registrytest.Until(t, "served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := http.Get(e.srv.URL + "/orders/1")
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					bad.Add(1)
				}
			}
		})
	}
	for i := range 50 {
		b := upstream(t, fmt.Sprintf("b%d", i))
		id := fmt.Sprintf("orders-b%d", i)
		e.register(t, id, b.URL, ordersRoutes...)
		e.reg.Registry.Deregister(context.Background(), id, 0)
	}
	cancel()
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d requests failed while the table was swapped", n)
	}
}

func TestPublicAliasForwardsToInvoke(t *testing.T) {
	e := newEnv(t)
	a := upstream(t, "a")
	req := apiv1.RegisterRequest{InstanceID: "orders-a", ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: a.URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.submit", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http",
			Metadata: json.RawMessage(`{"public_paths": ["/orders/submit", "/admin/steal"]}`)}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: "orders-a", Version: "1.0.0"}, Routes: ordersRoutes}}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "alias served", func() bool { return e.do(t, "POST", "/orders/submit", "{}").status == 200 })
	if got := e.do(t, "POST", "/orders/submit", `{"x":1}`); !strings.HasPrefix(got.body, "a /v1/capabilities/orders.submit/invoke") {
		t.Errorf("alias forwarded as %q", got.body)
	}
	if got := e.do(t, "POST", "/admin/steal", "{}"); got.status != 404 {
		t.Errorf("an alias outside the service's prefixes = %d, want 404", got.status)
	}
}

// TestDrainHandshakeLosesNoRequest stops one of two providers while a client sends a steady
// stream of POSTs (never retried) through the gateway: the provider deregisters, keeps
// serving until the gateway has acknowledged the withdrawal, and only then stops. No request
// may fail.
func TestDrainHandshakeLosesNoRequest(t *testing.T) {
	e := newEnv(t)
	start := func(name string) (*httptest.Server, func() error) {
		up := upstream(t, name)
		return up, registrytest.RunAgent(t, provider.Config{Registries: []string{e.reg.URL}, HeartbeatInterval: time.Hour,
			Registration: registrytest.Orders(name, up.URL)})
	}
	start("orders-a")
	upB, stopB := start("orders-b")
	registrytest.Until(t, "both instances in the table", func() bool {
		var r routing.RoutesAnswer
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return len(r.Routes) == 2 && len(r.Routes[0].Instances) == 2
	})
	load := registrytest.StartLoad(e.srv.URL+"/orders/1", "x", 4)
	registrytest.Until(t, "traffic flowing", func() bool { return load.Sent() > 50 })
	if err := stopB(); err != nil { // returns once the gateway has acknowledged the withdrawal
		t.Fatal(err)
	}
	upB.Close() // the provider stops serving only now
	before := load.Sent()
	registrytest.Until(t, "more traffic after the stop", func() bool { return load.Sent() > before+200 })
	load.Stop()
	if n := load.Failed(); n != 0 {
		t.Errorf("%d of %d requests failed while a provider drained", n, load.Sent())
	}
}

// TestAckWaitsForRequestsOnOlderTables: a request that started on a table (it may have
// picked an instance that table still had) holds the gateway's acknowledgement at that
// table's revision until it finishes; only then does a withdrawal count as applied.
func TestAckWaitsForRequestsOnOlderTables(t *testing.T) {
	e := newEnv(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		fmt.Fprint(w, "slow")
	}))
	defer slow.Close()
	let := sync.OnceFunc(func() { close(release) })
	defer let() // before the server closes: a failed test leaves no request hanging
	e.register(t, "orders-a", slow.URL, ordersRoutes...)
	req := apiv1.RegisterRequest{InstanceID: "orders-b", ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: upstream(t, "b").URL,
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "orders", Instance: "orders-b", Version: "1.0.0"},
			Routes: []apiv1.ManifestRoute{{Path: "/orders/b/report", Methods: []string{"GET"}}}}}
	reg, err := e.reg.Registry.Register(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	routes := func() (r routing.RoutesAnswer) {
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return r
	}
	registrytest.Until(t, "both instances' routes in the table", func() bool { return len(routes().Routes) == 4 }) // and the static one

	done := make(chan string, 1)
	go func() {
		resp, err := http.Get(e.srv.URL + "/orders/1")
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-arrived // the request is at orders-a, on the table that still has orders-b
	if err := e.reg.Registry.Deregister(context.Background(), "orders-b", 0); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "orders-b's route gone from the table", func() bool { return len(routes().Routes) == 3 })
	withdrawn := func() bool {
		w, err := e.reg.Registry.Withdrawal("orders-b", reg.Generation)
		if err != nil {
			t.Fatal(err)
		}
		return w.Acknowledged
	}
	for range 20 { // the gateway acknowledges at once, and polls every 10 ms: long enough to see it
		if withdrawn() {
			t.Fatal("the withdrawal was acknowledged while a request on the older table was in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	let()
	if got := <-done; got != "200 slow" {
		t.Fatalf("the request on the older table got %q", got)
	}
	registrytest.Until(t, "the withdrawal acknowledged once the request finished", withdrawn)
}

// TestDrainHandshakeDuringWarmUp stops a provider under traffic right after a registry
// restart, while the registry still answers complete=false and has not heard from every
// gateway. The gateway must drop the instance (the incomplete answers list what the registry
// removed, and the merge with what the gateway knew honours it), and the registry must not
// call the withdrawal acknowledged before it can know every live gateway. No request may fail.
func TestDrainHandshakeDuringWarmUp(t *testing.T) {
	e := newEnvWith(t, registry.Config{}, gateway.Config{AckInterval: 50 * time.Millisecond})
	upA, upB := upstream(t, "orders-a"), upstream(t, "orders-b")
	for name, up := range map[string]*httptest.Server{"orders-a": upA, "orders-b": upB} {
		req := registrytest.Orders(name, up.URL)
		if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}
	routes := func() (r routing.RoutesAnswer) {
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return r
	}
	twoUpstreams := func() bool { r := routes(); return len(r.Routes) == 2 && len(r.Routes[0].Instances) == 2 }
	registrytest.Until(t, "both instances in the table", twoUpstreams)

	// The registry restarts with empty state: a new epoch, inside its warm-up window.
	restarted := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(time.Hour))
	e.front.swap(restarted.Config.Handler)
	start := func(name string, up *httptest.Server) func() error {
		return registrytest.RunAgent(t, provider.Config{Registries: []string{e.reg.URL}, HeartbeatInterval: time.Hour, DrainTimeout: 2 * time.Second,
			Registration: registrytest.Orders(name, up.URL)})
	}
	e.reg.Config.Handler = restarted.Config.Handler // the agents reach the restarted registry too
	start("orders-a", upA)
	stopB := start("orders-b", upB)
	registrytest.Until(t, "both re-registered with the restarted registry", func() bool {
		_, errA := restarted.Registry.Instance("orders-a")
		_, errB := restarted.Registry.Instance("orders-b")
		return errA == nil && errB == nil
	})
	registrytest.Until(t, "the table follows the restarted registry (incomplete)", func() bool {
		r := routes()
		return r.RegistryEpoch == restarted.Registry.State().Epoch && twoUpstreams()
	})
	genB := func() int64 { in, _ := restarted.Registry.Instance("orders-b"); return in.Generation }()

	load := registrytest.StartLoad(e.srv.URL+"/orders/1", "x", 4)
	registrytest.Until(t, "traffic flowing", func() bool { return load.Sent() > 50 })
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	upB.Close() // the provider stops serving once its agent returns
	before := load.Sent()
	registrytest.Until(t, "more traffic after the stop", func() bool { return load.Sent() > before+200 })
	load.Stop()
	if n := load.Failed(); n != 0 {
		t.Errorf("%d of %d requests failed while a provider drained during the warm-up", n, load.Sent())
	}
	if r := routes(); len(r.Routes) != 2 || len(r.Routes[0].Instances) != 1 {
		t.Fatalf("orders-b still in the table: %+v", r.Routes)
	}

	// Not acknowledged while the registry may not know every live gateway — though this one
	// has acknowledged the new epoch's table; acknowledged once it has run for the gateway TTL.
	w, err := restarted.Registry.Withdrawal("orders-b", genB)
	if err != nil {
		t.Fatal(err)
	}
	if w.Acknowledged || w.Reason == "" || len(w.Pending) != 0 {
		t.Fatalf("withdrawal right after the restart: %+v, want not acknowledged, none pending, a reason", w)
	}
	restarted.Clock.Advance(registry.DefaultGatewayTTL)
	registrytest.Until(t, "the withdrawal acknowledged once every live gateway can be known", func() bool {
		w, err := restarted.Registry.Withdrawal("orders-b", genB)
		return err == nil && w.Acknowledged
	})
}

// TestAckFollowsTheRegistrysInterval: a registry that counts a gateway live for 3 s tells it
// to acknowledge every second; a gateway configured for every hour follows it, so it stays
// counted as live between two tables.
func TestAckFollowsTheRegistrysInterval(t *testing.T) {
	reg := registrytest.NewServer(t, registry.Config{GatewayTTL: 3 * time.Second})
	var acks atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/discovery/ack" {
			acks.Add(1)
		}
		reg.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close) // after the gateway's long poll ends (cleanups run last first)
	disc, err := discovery.New(discovery.Config{Registries: []string{front.URL}, WatchWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	serveGateway(t, gateway.Config{Discovery: disc, AckInterval: time.Hour, OutcomeWindow: -1}, true)
	registrytest.Until(t, "the first acknowledgement (of the first table)", func() bool { return acks.Load() >= 1 })
	registrytest.Until(t, "acknowledgements every second with no new table", func() bool { return acks.Load() >= 3 })
}

// TestStaticRoutesWithoutARegistry: a gateway whose registry has never answered serves its
// static routes from the first second, and says 503 (not 404) for everything else.
func TestStaticRoutesWithoutARegistry(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	disc, err := discovery.New(discovery.Config{Registries: []string{dead.URL}})
	if err != nil {
		t.Fatal(err)
	}
	static := upstream(t, "static")
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1,
		Static: []routing.StaticRoute{{Path: "/static/{rest...}", Methods: []string{"GET"}, Upstream: static.URL}}}, false) // the static table exists from New
	e := &env{srv: srv}
	if a := e.do(t, "GET", "/static/x", ""); a.status != 200 || !strings.HasPrefix(a.body, "static /static/x") {
		t.Fatalf("static route without a registry: %d %q", a.status, a.body)
	}
	if a := e.do(t, "GET", "/orders/1", ""); a.status != 503 || !strings.Contains(a.body, "the registry has not answered") {
		t.Fatalf("dynamic path without a registry: %d %q, want 503", a.status, a.body)
	}
}

// TestStateDirKeepsRoutesAcrossARestart: a gateway with --state-dir saves its routes view; one
// restarted while the registry is down serves the dynamic routes it served before, marked as
// a snapshot with its age — an hour later too, by default; past a --max-stale it was given,
// not.
func TestStateDirKeepsRoutesAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnvWith(t, registry.Config{}, gateway.Config{StateDir: dir})
	e.register(t, "orders-a", upstream(t, "orders-a").URL, ordersRoutes...)
	registrytest.Until(t, "the route in the table", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	// The route is served before the view holding it is written (an earlier view may be on
	// disk already): wait for the one that holds it.
	registrytest.Until(t, "the view with the route saved", func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "gateway-routes.json"))
		return err == nil && strings.Contains(string(raw), "orders-a")
	})

	e.front.down.Store(true) // the registry goes away, and the gateway restarts
	disc, err := discovery.New(discovery.Config{Registries: []string{e.reg.URL + "/down"}, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, StateDir: dir, OutcomeWindow: -1,
		Policy: func() routing.Policy { return routing.Policy{"orders": {"/orders"}} }}, true)
	restarted := &env{srv: srv}
	var a answer
	registrytest.Until(t, "the saved route served", func() bool { a = restarted.do(t, "GET", "/orders/1", ""); return a.status == 200 })
	if !strings.HasPrefix(a.body, "orders-a") || a.header.Get("X-Cache-Source") != "snapshot" || a.header.Get("X-Route-Table-Age") == "" {
		t.Fatalf("after the restart: %q, X-Cache-Source %q, X-Route-Table-Age %q; want orders-a from a snapshot with its age",
			a.body, a.header.Get("X-Cache-Source"), a.header.Get("X-Route-Table-Age"))
	}

	// By default a view an hour old is still served: the last-known-good view is
	// authoritative for as long as the registry is away.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	hourDisc, err := discovery.New(discovery.Config{Registries: []string{e.reg.URL + "/down"}, RetryInterval: time.Hour, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	_, srv1 := serveGateway(t, gateway.Config{Discovery: hourDisc, StateDir: dir, OutcomeWindow: -1, Now: later,
		Policy: func() routing.Policy { return routing.Policy{"orders": {"/orders"}} }}, true)
	registrytest.Until(t, "the hour-old view served by default", func() bool {
		a = (&env{srv: srv1}).do(t, "GET", "/orders/1", "")
		return a.status == 200 && a.header.Get("X-Cache-Source") == "snapshot"
	})

	// A gateway restarted later than a --max-stale it was given after the save restores the
	// view, but its dynamic routes answer 503 STALE_VIEW_EXPIRED: a view that old is not served.
	oldDisc, err := discovery.New(discovery.Config{Registries: []string{e.reg.URL + "/down"}, RetryInterval: time.Hour, Now: later, StaleAllowance: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, srv2 := serveGateway(t, gateway.Config{Discovery: oldDisc, StateDir: dir, OutcomeWindow: -1, Now: later,
		Policy: func() routing.Policy { return routing.Policy{"orders": {"/orders"}} }}, true)
	tooOld := &env{srv: srv2}
	registrytest.Until(t, "the too old view refused", func() bool {
		a = tooOld.do(t, "GET", "/orders/1", "")
		return a.status == 503 && strings.Contains(a.body, apiv1.CodeStaleViewExpired)
	})
}

// TestInvalidationsCoalesce: a flood of invalidations is at most one registry refetch in
// flight, and one a second: 400 calls from 8 clients cost a handful of registry requests.
func TestInvalidationsCoalesce(t *testing.T) {
	reg := registrytest.NewServer(t, registry.Config{})
	reg.Clock.Advance(registry.DefaultLeaseTTL)
	var fetches atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/discovery/routes" && r.URL.Query().Get("index") == "" {
			fetches.Add(1) // a plain fetch: what an invalidation asks for (the watch long-polls)
		}
		reg.Config.Handler.ServeHTTP(w, r)
	}))
	defer front.Close()
	disc, err := discovery.New(discovery.Config{Registries: []string{front.URL}, WatchWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1}, false)
	before := fetches.Load()
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 50 {
				req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/discovery/invalidate", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	n, secs := fetches.Load()-before, time.Since(start).Seconds()
	if failed.Load() != 0 {
		t.Errorf("%d invalidations failed", failed.Load())
	}
	if limit := int64(secs) + 2; n > limit { // one per second, plus the first and one at the edge
		t.Errorf("400 invalidations in %.1f s made %d registry refetches, want at most %d", secs, n, limit)
	}
}

// TestSlowBodiesHoldNoUpstream: a request body up to MaxBufferedBody is read whole before
// anything goes upstream, so a client that sends it slowly gets 408 and its connection
// closed without the upstream ever seeing it (before, each such client held an upstream
// connection for as long as it liked); bodies of every shape still arrive intact.
func TestSlowBodiesHoldNoUpstream(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %x", len(body), sha256.Sum256(body))
	}))
	t.Cleanup(up.Close)
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}}) // never asked: the static table serves
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1, Static: []routing.StaticRoute{{Path: "/upload", Methods: []string{"POST"}, Upstream: up.URL}},
		Policy: func() routing.Policy { return nil }, MaxBufferedBody: 1024, BodyTimeout: 300 * time.Millisecond}, false)

	t.Run("slow body", func(t *testing.T) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789") // and then nothing
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(string(body), apiv1.CodeRequestTimeout) {
			t.Errorf("slow body = %d (close %v) %s, want 408 REQUEST_TIMEOUT and the connection closed", resp.StatusCode, resp.Close, body)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the upstream saw %d requests of a body that never arrived", n)
		}
	})

	payload := func(n int) []byte { return bytes.Repeat([]byte("meshflows"), n/9+1)[:n] }
	for _, tt := range []struct {
		name    string
		size    int
		chunked bool
	}{
		{"small, buffered", 700, false},
		{"small, chunked", 700, true},
		{"large, streamed", 50_000, false},
		{"large, chunked, streamed after the first KiB", 50_000, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := payload(tt.size)
			var rd io.Reader = bytes.NewReader(body)
			if tt.chunked {
				rd = io.MultiReader(rd) // hides the length: sent chunked
			}
			resp, err := http.Post(srv.URL+"/upload", "application/octet-stream", rd)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); resp.StatusCode != 200 || string(got) != want {
				t.Errorf("= %d %s, want 200 %s", resp.StatusCode, got, want)
			}
		})
	}
}

// TestUpstreamRestartBehindTheGateway: the gateway's pooled connections to an upstream die
// with it; after the upstream comes back on the same address, the next GET is answered by
// the new process, not failed on a dead connection, and a HEAD and a POST go through too.
func TestUpstreamRestartBehindTheGateway(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	serve := func(l net.Listener, name string) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s", name, r.Method, body)
		}))
		s.Listener.Close()
		s.Listener = l
		s.Start()
		return s
	}
	first := serve(l, "first")
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}}) // never asked: the static table serves
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1, Policy: func() routing.Policy { return nil },
		Static: []routing.StaticRoute{{Path: "/{rest...}", Methods: []string{"GET", "HEAD", "POST"}, Upstream: "http://" + addr}}}, false)
	send := func(method, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/items/1", strings.NewReader(body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 3 { // the gateway now holds pooled connections to the first process
		if code, body := send("GET", ""); code != 200 || body != "first GET " {
			t.Fatalf("before the restart: %d %q", code, body)
		}
	}
	first.CloseClientConnections()
	first.Close()
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	second := serve(l, "second")
	defer second.Close()
	for _, tt := range []struct{ method, body, want string }{
		{"GET", "", "second GET "},
		{"HEAD", "", ""},
		{"POST", "sent", "second POST sent"},
		{"GET", "", "second GET "},
	} {
		if code, body := send(tt.method, tt.body); code != 200 || body != tt.want {
			t.Errorf("%s after the restart: %d %q, want 200 %q", tt.method, code, body, tt.want)
		}
	}
}

// TestEarlyHintsPassThroughTheGateway: an upstream's 103 Early Hints reach the client before
// the answer, as ReverseProxy forwards them.
func TestEarlyHintsPassThroughTheGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}}) // never asked: the static table serves
	if err != nil {
		t.Fatal(err)
	}
	_, srv := serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1, Policy: func() routing.Policy { return nil },
		Static: []routing.StaticRoute{{Path: "/page", Methods: []string{"GET"}, Upstream: up.URL}}}, false)
	var hints []string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}})
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/page", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := []string{"103 </style.css>; rel=preload"}; resp.StatusCode != 200 || string(body) != "ok" || !slices.Equal(hints, want) {
		t.Errorf("got %d %q after %q, want 200 ok after %q", resp.StatusCode, body, hints, want)
	}
}

// staleCounter is a transport that counts the gateway's requests to close stale connections.
type staleCounter struct {
	http.RoundTripper
	asked chan struct{}
}

func (s *staleCounter) CloseStale() {
	select {
	case s.asked <- struct{}{}:
	default:
	}
}

// TestGatewayClosesStaleUpstreamConnections: the running gateway asks its transport to close
// the connections idle for too long, without waiting for a request to come.
func TestGatewayClosesStaleUpstreamConnections(t *testing.T) {
	tr := &staleCounter{RoundTripper: http.DefaultTransport, asked: make(chan struct{}, 1)}
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	serveGateway(t, gateway.Config{Discovery: disc, OutcomeWindow: -1, Transport: tr, PolicyCheck: 10 * time.Millisecond}, true)
	select {
	case <-tr.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never asked its transport to close stale connections")
	}
}

// TestRequestsCountedBySourceAndCode: meshflows_gateway_requests_total counts every
// request once, by the source of the route that answered (none without one) and the status.
func TestRequestsCountedBySourceAndCode(t *testing.T) {
	e := newEnv(t)
	// the registry's table, not the static one a gateway serves before it (where an unknown
	// path is 503): asked through the admin endpoint, which the counter does not count
	registrytest.Until(t, "the gateway has the registry's table", func() bool {
		var routes routing.RoutesAnswer
		return json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &routes) == nil && routes.RegistryEpoch != ""
	})
	for _, tc := range []struct {
		method, path string
		n            int
	}{
		{"GET", "/static/x", 3},
		{"GET", "/nothing", 2},
		{"PUT", "/static/x", 1},
	} {
		for range tc.n {
			e.do(t, tc.method, tc.path, "")
		}
	}
	want := `
# HELP meshflows_gateway_requests_total Requests by route source (static, dynamic, none) and status code.
# TYPE meshflows_gateway_requests_total counter
meshflows_gateway_requests_total{code="200",source="static"} 3
meshflows_gateway_requests_total{code="404",source="none"} 2
meshflows_gateway_requests_total{code="405",source="none"} 1
`
	if err := testutil.GatherAndCompare(e.prom, strings.NewReader(want), "meshflows_gateway_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestAnAnswerNamingAnotherInstanceIsRefused: an upstream whose answer names another
// instance in X-Instance is not the instance the request went to (another process took its
// address): the gateway answers 502 and counts it; an answer naming the instance, or naming
// none, passes.
func TestAnAnswerNamingAnotherInstanceIsRefused(t *testing.T) {
	e := newEnv(t)
	var names atomic.Value
	names.Store("orders-a")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := names.Load().(string); n != "" {
			w.Header().Set(gateway.InstanceHeader, n)
		}
		fmt.Fprintf(w, "answered %s", r.URL.Path)
	}))
	t.Cleanup(up.Close)
	e.register(t, "orders-a", up.URL, ordersRoutes...)
	registrytest.Until(t, "the route is served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	for _, tt := range []struct {
		names  string
		status int
	}{{"orders-a", 200}, {"", 200}, {"orders-zombie", 502}} {
		names.Store(tt.names)
		if got := e.do(t, "GET", "/orders/1", ""); got.status != tt.status {
			t.Errorf("an answer naming %q: %d %q, want %d", tt.names, got.status, got.body, tt.status)
		} else if tt.status == 502 && !strings.Contains(got.body, "another process took its address") {
			t.Errorf("the 502 does not say why: %q", got.body)
		}
	}
}
