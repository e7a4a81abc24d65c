package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestXDSAgainstDev asks meshflows dev's xDS server for the endpoints of messaging.publish
// over ADS and finds both example providers, healthy, with a weight.
func TestXDSAgainstDev(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	cc, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(base+devXDSOffset), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "test"}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"messaging.publish"}}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) != 2 { // the providers register a moment after dev is up: later versions bring them
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("no answer with both providers: %v (last: %v)", err, got)
		}
		got = got[:0]
		for _, r := range resp.GetResources() {
			var cla endpointv3.ClusterLoadAssignment
			if err := r.UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			for _, l := range cla.GetEndpoints() {
				for _, ep := range l.GetLbEndpoints() {
					if ep.GetHealthStatus() == corev3.HealthStatus_HEALTHY && ep.GetLoadBalancingWeight().GetValue() >= 1 {
						got = append(got, strconv.Itoa(int(ep.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())))
					}
				}
			}
		}
		req.VersionInfo, req.ResponseNonce = resp.GetVersionInfo(), resp.GetNonce()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	if want := []string{strconv.Itoa(base + devProviderOffsetJMS), strconv.Itoa(base + devProviderOffsetRMQ)}; !slices.Equal(got, want) {
		t.Errorf("endpoints on ports %v, want %v", got, want)
	}
}
