package xds_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/xds"
)

// TestARampStepWaitsForTheWeightDelay: a change of an endpoint's weight alone (a slow
// start's step) is not sent by itself: the next change of the cluster carries it, or, when
// none comes, the server sends it once it has waited Config.WeightDelay (on the server's
// clock, here a fake one).
func TestARampStepWaitsForTheWeightDelay(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano())
	e := newEnv(t, time.Minute, func(c *xds.Config) {
		c.WeightDelay = time.Second
		c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	b := startBackend(t)
	e.register(t, "jms-1", "jms", b)
	c := e.ads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang bound
	defer cancel()
	sweep := func(d time.Duration) {
		t.Helper()
		e.reg.Clock.Advance(d)
		if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// the server has every change up to a marker once CDS holds the marker's cluster (the
	// changes come in order)
	cds := adsStream(t, ctx, c, "cds", resourcev3.ClusterType)
	markers := 0
	processed := func() {
		t.Helper()
		markers++
		id := "marker-" + string(rune('0'+markers))
		req := apiv1.RegisterRequest{InstanceID: id, ServiceName: id, ServiceVersion: "1.0.0", Endpoint: "http://" + b.addr, Zone: "a",
			Capabilities: []apiv1.Capability{{CapabilityID: "marker.c" + string(rune('0'+markers)), CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}}
		if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		want := xds.ClusterName(req.Capabilities[0].CapabilityID, "")
		for {
			resp, err := cds.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if err := cds.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.GetResources() {
				var cl clusterv3.Cluster
				if err := a.UnmarshalTo(&cl); err != nil {
					t.Fatal(err)
				}
				if cl.GetName() == want {
					return
				}
			}
		}
	}
	jms := xds.ClusterName("messaging.publish", "jms")
	eds := adsStream(t, ctx, c, "eds", resourcev3.EndpointType, jms)
	// weights reads the next assignment of jms (and acknowledges it): each endpoint's weight
	weights := func() map[string]uint32 {
		t.Helper()
		resp, err := eds.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := eds.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{jms},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, a := range resp.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				for _, lb := range l.GetLbEndpoints() {
					out[lb.GetEndpoint().GetHostname()] = lb.GetLoadBalancingWeight().GetValue()
				}
			}
		}
		return out
	}
	first := weights()
	for len(first) == 0 { // the server may answer before its first view of the registry holds jms-1
		first = weights()
	}
	if len(first) != 1 || first["jms-1"] == 0 {
		t.Fatalf("first assignment %v, want jms-1 alone", first)
	}
	weightNow := func(id string) uint32 {
		t.Helper()
		in, err := e.reg.Registry.Instance(id)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(in.Weight)
	}

	// a ramp step, then another endpoint: one assignment carries both
	sweep(20 * time.Second)
	stepped := weightNow("jms-1")
	if stepped == first["jms-1"] {
		t.Fatalf("the ramp did not move: %d", stepped)
	}
	processed()
	e.register(t, "jms-2", "jms", b)
	got := weights()
	if len(got) != 2 || got["jms-1"] != stepped {
		t.Fatalf("after a ramp step and a new endpoint the stream got %v; want jms-1 at %d with jms-2, in one assignment (the step alone was sent first)", got, stepped)
	}

	// a ramp step alone: sent once it has waited the delay
	sweep(20 * time.Second)
	stepped = weightNow("jms-1")
	processed()
	clock.Add(int64(time.Second))
	if got := weights(); got["jms-1"] != stepped {
		t.Fatalf("after the delay the stream got %v; want jms-1 at %d", got, stepped)
	}
}
