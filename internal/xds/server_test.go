package xds_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/xds"
)

// backend is a gRPC server with the health service that counts the calls it answers.
type backend struct {
	addr  string
	calls atomic.Int64
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: ln.Addr().String()}
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, grpchealth.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return b
}

type env struct {
	logs *registrytest.SyncBuffer
	reg  *registrytest.Server
	gens map[string]int64
	addr string // the xDS server
	stop func()
}

// newEnv runs a registry with the eligibility engine, the xDS server over a discovery client
// of it, and returns them.
func newEnv(t testing.TB, slowStart time.Duration, opts ...func(*xds.Config)) *env {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{SlowStart: slowStart}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{reg: registrytest.NewServer(t, registry.Config{Eligibility: m}), gens: map[string]int64{}}
	e.reg.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up
	disc, err := discovery.New(discovery.Config{Registries: []string{e.reg.URL}, WatchWait: 200 * time.Millisecond,
		RequestTimeout: time.Second, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.logs = &registrytest.SyncBuffer{}
	cfg := xds.Config{Discovery: disc, ShutdownGrace: time.Second, Logger: slog.New(slog.NewTextHandler(e.logs, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := xds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(e.stop)
	return e
}

func (e *env) register(t *testing.T, id, provider string, b *backend) {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-" + provider, ServiceVersion: "1.0.0", Endpoint: "http://" + b.addr, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: provider}}}
	resp, err := e.reg.Registry.Register(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	e.gens[id] = resp.Generation
}

// client dials target through gRPC's xDS resolver, bootstrapped at the test's xDS server.
func (e *env) client(t *testing.T, target string) healthpb.HealthClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "test-client", "locality": {"zone": "a"}}}`, e.addr)
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// calls makes n health checks and fails the test on the first error.
func calls(t *testing.T, c healthpb.HealthClient, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// TestGRPCClientThroughXDS: a gRPC client with an xds:/// target reaches both registered
// instances; a deregistered one stops getting calls; with the registry
// gone, calls go on from the last snapshot; a provider's own cluster reaches only it.
func TestGRPCClientThroughXDS(t *testing.T) {
	e := newEnv(t, time.Nanosecond)
	jms, rmq := startBackend(t), startBackend(t)
	e.register(t, "jms-1", "jms", jms)
	e.register(t, "rmq-1", "rabbitmq", rmq)
	c := e.client(t, "xds:///messaging.publish")
	calls(t, c, 100)
	if jms.calls.Load() == 0 || rmq.calls.Load() == 0 {
		t.Fatalf("calls were not spread: jms %d, rabbitmq %d", jms.calls.Load(), rmq.calls.Load())
	}

	if err := e.reg.Registry.Deregister(context.Background(), "rmq-1", e.gens["rmq-1"]); err != nil {
		t.Fatal(err)
	}
	// How fast a change reaches streams is BenchmarkViewChangeReachesStreams' figure; here it
	// must happen at all.
	registrytest.Until(t, "the deregistered instance gets no more calls", func() bool {
		before := rmq.calls.Load()
		calls(t, c, 20)
		return rmq.calls.Load() == before
	})

	e.reg.Close() // the registry goes away: the snapshot stays
	before := jms.calls.Load()
	calls(t, c, 50)
	if got := jms.calls.Load() - before; got != 50 {
		t.Errorf("with the registry away jms got %d of 50 calls", got)
	}

	only := e.client(t, "xds:///messaging.publish/jms")
	before = jms.calls.Load()
	calls(t, only, 10)
	if got := jms.calls.Load() - before; got != 10 {
		t.Errorf("the jms cluster sent %d of 10 calls to jms", got)
	}
}

// TestWeightsReachTheClient: an instance at full weight and one in slow start at about a
// quarter of it get calls in about that ratio.
func TestWeightsReachTheClient(t *testing.T) {
	e := newEnv(t, time.Minute)
	full, ramping := startBackend(t), startBackend(t)
	e.register(t, "full", "jms", full)
	e.reg.Clock.Advance(61 * time.Second) // past its slow start, within its lease
	if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.register(t, "ramping", "jms", ramping)
	e.reg.Clock.Advance(10 * time.Second) // a sixth into its slow start
	if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	weights := map[string]int{}
	for _, c := range e.reg.Registry.Query(&registry.Query{CapabilityID: "messaging.publish"}).Entries {
		weights[c.Record.InstanceID] = c.Weight
	}
	if weights["full"] != 100 || weights["ramping"] < 15 || weights["ramping"] > 35 {
		t.Fatalf("weights %v: want 100 and about 25", weights)
	}
	c := e.client(t, "xds:///messaging.publish")
	calls(t, c, 10) // the snapshot with both has reached the client once both get calls
	deadline := time.Now().Add(5 * time.Second)
	for ramping.calls.Load() == 0 && time.Now().Before(deadline) {
		calls(t, c, 10)
	}
	f0, r0 := full.calls.Load(), ramping.calls.Load()
	calls(t, c, 2000)
	got := float64(full.calls.Load()-f0) / float64(max(ramping.calls.Load()-r0, 1))
	want := float64(weights["full"]) / float64(weights["ramping"])
	if got < want*0.7 || got > want*1.3 {
		t.Errorf("calls full:ramping = %.2f, want about %.2f (weights %v)", got, want, weights)
	}
}

// adsStream opens a raw ADS stream as node and asks for names of typ.
func adsStream(t testing.TB, ctx context.Context, c discoveryv3.AggregatedDiscoveryServiceClient, node, typ string, names ...string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	st, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: typ, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	return st
}

// ads dials the test's xDS server in plaintext and returns an ADS client on the connection,
// closed when the test ends.
func (e *env) ads(t testing.TB) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
}

// TestStreamsAbuse: a thousand streams at once are each answered and released; a name that
// does not exist is answered without it (the client learns it does not exist); a NACK is logged with the client's error; a
// stream dropped mid-update does not disturb the others.
func TestStreamsAbuse(t *testing.T) {
	e := newEnv(t, time.Nanosecond)
	e.register(t, "jms-1", "jms", startBackend(t))
	c := e.ads(t)

	// the view reaches the server
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := adsStream(t, ctx, c, "probe", resourcev3.ListenerType, "messaging.publish")
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sctx, scancel := context.WithCancel(ctx)
	streams := make([]discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, 1000)
	for i := range streams {
		streams[i] = adsStream(t, sctx, c, fmt.Sprintf("client-%d", i), resourcev3.ClusterType, "messaging.publish", "messaging.publish/jms")
	}
	for i, st := range streams {
		resp, err := st.Recv()
		if err != nil || len(resp.GetResources()) != 2 {
			t.Fatalf("stream %d: %d resources, %v", i, len(resp.GetResources()), err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("1,000 open streams: %.1f KiB of heap each (both ends, this process)", float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1000/1024)
	scancel() // every stream dropped at once
	for _, st := range streams {
		st.Recv() // ends with the cancellation
	}

	unknown := adsStream(t, ctx, c, "lost", resourcev3.ListenerType, "no.such.capability")
	if resp, err := unknown.Recv(); err != nil || len(resp.GetResources()) != 0 {
		t.Fatalf("a name that does not exist: %d resources, %v; want an answer without it", len(resp.GetResources()), err)
	}

	nack := adsStream(t, ctx, c, "picky", resourcev3.ListenerType, "messaging.publish")
	resp, err := nack.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := nack.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "picky"}, TypeUrl: resourcev3.ListenerType, ResourceNames: []string{"messaging.publish"},
		ResponseNonce: resp.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: "listener refused for the test"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(e.logs.String(), "listener refused for the test") {
		if time.Now().After(deadline) {
			t.Fatalf("the NACK was not logged:\n%s", e.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// the server still answers after all of it
	again := adsStream(t, ctx, c, "after", resourcev3.EndpointType, "messaging.publish")
	if resp, err := again.Recv(); err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("after the abuse: %v, %v", resp, err)
	}
}

// TestResponsesStayUnderTheBound: EDS responses larger than MaxResponseBytes go out over
// several responses, each under the bound and each acknowledged before the next, which
// together hold every cluster's endpoints (a client with gRPC's default 4 MiB receive limit
// rejected one 6.8 MB response of 10 clusters of 10,000 endpoints).
func TestResponsesStayUnderTheBound(t *testing.T) {
	const bound = 1500
	e := newEnv(t, time.Nanosecond, func(c *xds.Config) { c.MaxResponseBytes = bound })
	b := startBackend(t)
	providers := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	var names []string
	for _, p := range providers {
		names = append(names, xds.ClusterName("messaging.publish", p))
		for i := range 10 {
			e.register(t, fmt.Sprintf("%s-%d", p, i), p, b)
		}
	}
	e.reg.Clock.Advance(time.Second)
	if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := e.ads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	registrytest.Until(t, "every endpoint in the view", func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st := adsStream(t, ctx, c, "probe", resourcev3.EndpointType, xds.ClusterName("messaging.publish", ""))
		resp, err := st.Recv()
		if err != nil || len(resp.GetResources()) != 1 {
			return false
		}
		var cla endpointv3.ClusterLoadAssignment
		if err := resp.GetResources()[0].UnmarshalTo(&cla); err != nil || len(cla.GetEndpoints()) == 0 {
			return false
		}
		n := 0
		for _, l := range cla.GetEndpoints() {
			n += len(l.GetLbEndpoints())
		}
		return n == 60
	})
	st := adsStream(t, ctx, c, "split", resourcev3.EndpointType, names...)
	got := map[string]int{}
	responses := 0
	for len(got) < len(names) {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d responses (%d clusters): %v", responses, len(got), err)
		}
		responses++
		if n := proto.Size(resp); n > bound && len(resp.GetResources()) > 1 {
			t.Errorf("response %d: %d bytes for %d resources, over the bound of %d", responses, n, len(resp.GetResources()), bound)
		}
		for _, a := range resp.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				got[cla.GetClusterName()] += len(l.GetLbEndpoints())
			}
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "split"}, TypeUrl: resourcev3.EndpointType, ResourceNames: names,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	if responses < 2 {
		t.Errorf("%d clusters came in %d response: the bound did not split them", len(names), responses)
	}
	for _, n := range names {
		if got[n] != 10 {
			t.Errorf("cluster %s: %d endpoints, want 10", n, got[n])
		}
	}
}

// The stream cap: past the burst a new stream is refused RESOURCE_EXHAUSTED with the wait in
// gRPC's pushback trailer, while the streams already open keep being served; the bucket
// refills at its rate.
func TestNewStreamsPastTheCapAreRefusedWithAPushback(t *testing.T) {
	clock := registrytest.NewClock(time.Now())
	e := newEnv(t, time.Nanosecond, func(c *xds.Config) { c.StreamRate, c.StreamBurst, c.Now = 1, 2, clock.Now })
	e.register(t, "jms-1", "jms", startBackend(t))
	c := e.ads(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var open []discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	clusters := 0
	for i := range 2 {
		st := adsStream(t, ctx, c, fmt.Sprintf("n%d", i), resourcev3.ClusterType)
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("stream %d of the burst: %v", i, err)
		}
		clusters = len(resp.GetResources())
		if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		open = append(open, st)
	}
	st := adsStream(t, ctx, c, "n-past", resourcev3.ClusterType)
	_, err := st.Recv()
	if grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a stream past the burst: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := st.Trailer().Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "1000" {
		t.Errorf("pushback trailer %q, want [1000]", got)
	}
	e.register(t, "rmq-1", "rabbitmq", startBackend(t)) // a new cluster reaches the open streams
	for i, st := range open {
		// a push already under way (jms-1's verdict moving) may come first: acknowledge it and
		// read on until the one with the new cluster (the stream's context bounds the wait)
		for {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("open stream %d after a refusal: %v; want a push with more than %d clusters", i, err, clusters)
			}
			if len(resp.GetResources()) > clusters {
				break
			}
			if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock.Advance(time.Second)
	st = adsStream(t, ctx, c, "n-later", resourcev3.ClusterType)
	if _, err := st.Recv(); err != nil {
		t.Fatalf("a stream after the bucket refilled: %v", err)
	}
}
