package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// BenchmarkViewChangeReachesStreams: with 10,000 instances of one capability, one
// registration until 100 ADS streams watching that capability's endpoints all hold the new
// version (through the registry, the discovery long poll, the snapshot and the streams).
func BenchmarkViewChangeReachesStreams(b *testing.B) {
	const instances, streams = 10000, 100
	e := newEnv(b, time.Nanosecond)
	ctx := context.Background()
	reg := func(i int) {
		req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("i-%d", i), ServiceName: "svc", ServiceVersion: "1.0.0",
			Endpoint: fmt.Sprintf("http://127.0.0.%d:%d", 1+i%200, 1024+i%50000), Zone: "a",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := e.reg.Registry.Register(ctx, &req); err != nil {
			b.Fatal(err)
		}
	}
	for i := range instances {
		reg(i)
	}
	c := e.ads(b)
	sts := make([]discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, streams)
	versions := make([]string, streams)
	for i := range sts {
		sts[i] = adsStream(b, ctx, c, fmt.Sprintf("n%d", i), resourcev3.EndpointType, "messaging.publish")
	}
	// every stream holds the full view first
	for i, st := range sts {
		for {
			resp, err := st.Recv()
			if err != nil {
				b.Fatal(err)
			}
			versions[i] = resp.GetVersionInfo()
			ack(b, st, resp)
			if len(resp.GetResources()) == 1 && len(resp.GetResources()[0].GetValue()) > instances*20 {
				break
			}
		}
	}
	n := instances
	b.ResetTimer()
	for b.Loop() {
		reg(n)
		n++
		for i, st := range sts {
			resp, err := st.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if resp.GetVersionInfo() == versions[i] {
				b.Fatalf("stream %d: the same version again", i)
			}
			versions[i] = resp.GetVersionInfo()
			ack(b, st, resp)
		}
	}
}

// ack acknowledges resp on st, as a client that accepted it.
func ack(b *testing.B, st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, resp *discoveryv3.DiscoveryResponse) {
	if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
		ResourceNames: []string{"messaging.publish"}}); err != nil {
		b.Fatal(err)
	}
}
