package xds_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/xds"
)

// TestAnAssignmentNobodyWatchedIsCurrentWhenAsked: the endpoints of a cluster change while
// no stream subscribes to its assignment (only to the clusters); a stream that subscribes
// then, state-of-the-world or incremental, gets the assignment as it is now, not as it was
// when last built.
func TestAnAssignmentNobodyWatchedIsCurrentWhenAsked(t *testing.T) {
	e := newEnv(t, time.Nanosecond)
	b := startBackend(t)
	e.register(t, "jms-1", "jms", b)
	c := e.ads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// CDS (every cluster) until it holds the named ones: the view has reached the server
	cds := adsStream(t, ctx, c, "cds", resourcev3.ClusterType)
	clustersHeld := func(want ...string) {
		t.Helper()
		for {
			resp, err := cds.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range resp.GetResources() {
				var cl clusterv3.Cluster
				if err := a.UnmarshalTo(&cl); err != nil {
					t.Fatal(err)
				}
				got = append(got, cl.GetName())
			}
			if err := cds.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
			held := true
			for _, w := range want {
				held = held && slices.Contains(got, w)
			}
			if held {
				return
			}
		}
	}
	jms := xds.ClusterName("messaging.publish", "jms")
	clustersHeld(jms)
	// a second endpoint of jms and one of amqp, their verdicts settled; then a cluster of
	// another capability: once CDS has that one, the server has every change of
	// messaging.publish (the changes come in order), and no stream held its assignments
	e.register(t, "jms-2", "jms", b)
	e.register(t, "amqp-1", "amqp", b)
	e.reg.Clock.Advance(time.Second)
	if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	marker := apiv1.RegisterRequest{InstanceID: "orders-1", ServiceName: "orders", ServiceVersion: "1.0.0", Endpoint: "http://" + b.addr, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "db"}}}
	if _, err := e.reg.Registry.Register(context.Background(), &marker); err != nil {
		t.Fatal(err)
	}
	clustersHeld(jms, xds.ClusterName("messaging.publish", "amqp"), xds.ClusterName("orders.read", ""))

	endpoints := func(resources []*anypb.Any) int {
		t.Helper()
		n := 0
		for _, a := range resources {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				n += len(l.GetLbEndpoints())
			}
		}
		return n
	}
	eds := adsStream(t, ctx, c, "eds", resourcev3.EndpointType, jms)
	resp, err := eds.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n := endpoints(resp.GetResources()); n != 2 {
		t.Errorf("state of the world: %s has %d endpoints, want 2 (jms-1, jms-2)", jms, n)
	}

	delta, err := c.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	every := xds.ClusterName("messaging.publish", "")
	if err := delta.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{every}}); err != nil {
		t.Fatal(err)
	}
	dresp, err := delta.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var got []*anypb.Any
	for _, r := range dresp.GetResources() {
		got = append(got, r.GetResource())
	}
	if n := endpoints(got); n != 3 {
		t.Errorf("incremental: %s has %d endpoints, want 3", every, n)
	}
}
