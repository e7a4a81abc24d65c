package xds

import (
	"fmt"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
)

// TestRegionsAsPriorities: a regional server's assignment holds home's endpoints at the
// first priorities (its own metadata priorities in order), then each peer's in the priority
// order; instances of the same id in two regions stay apart; a region switched off has no
// endpoint, and a delta of one region never touches another's.
func TestRegionsAsPriorities(t *testing.T) {
	s, err := New(Config{Discovery: &discovery.Client{}, Home: "a", Peers: []Peer{{Region: "c"}, {Region: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(id, ip, meta string) apiv1.CapabilityEntry {
		e := apiv1.CapabilityEntry{InstanceID: id, CapabilityID: "messaging.publish", Provider: "jms", CapabilityVersion: "1.0.0",
			Endpoint: "http://" + ip + ":8080", Generation: 1, Eligibility: "serving", Weight: 100}
		if meta != "" {
			e.Metadata = []byte(meta)
		}
		return e
	}
	reset := func(region string, es ...apiv1.CapabilityEntry) {
		s.updateIn(region)(&discovery.Delta{Epoch: "e", Revision: 1, Complete: true, Reset: true, Entries: es})
	}
	reset("a", entry("i-1", "10.0.0.1", `{"priority":1}`), entry("i-2", "10.0.0.2", ""))
	reset("b", entry("i-1", "10.0.2.1", ""))
	reset("c", entry("i-1", "10.0.1.1", ""))
	name := ClusterName("messaging.publish", "jms")
	got := func() []string {
		t.Helper()
		s.realize([]string{name}, true) // as a stream subscribed to it
		s.mu.Lock()
		defer s.mu.Unlock()
		r, ok := s.caps[resourcev3.EndpointType][name]
		if !ok {
			return nil
		}
		b, err := proto.Marshal(r.(proto.Message))
		if err != nil {
			t.Fatal(err)
		}
		var cla endpointv3.ClusterLoadAssignment
		if err := proto.Unmarshal(b, &cla); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range cla.Endpoints {
			out = append(out, fmt.Sprintf("%d %s %s %s", l.Priority, l.Locality.Region, l.Locality.SubZone,
				l.LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address))
		}
		return out
	}
	want := []string{"0 a a/i-1 10.0.0.1", "1 a a/i-2 10.0.0.2", "2 c c/i-1 10.0.1.1", "3 b b/i-1 10.0.2.1"}
	if diff := cmp.Diff(want, got()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// b's registry answers anew without i-1: a's and c's stay
	reset("b")
	if diff := cmp.Diff(want[:3], got()); diff != "" {
		t.Fatalf("after b's reset (-want +got):\n%s", diff)
	}
	reset("b", entry("i-1", "10.0.2.1", ""))
	s.setOff(map[string]bool{"a": true})
	if diff := cmp.Diff([]string{"0 c c/i-1 10.0.1.1", "1 b b/i-1 10.0.2.1"}, got()); diff != "" {
		t.Fatalf("a off (-want +got):\n%s", diff)
	}
	s.setOff(map[string]bool{})
	if diff := cmp.Diff(want, got()); diff != "" {
		t.Fatalf("a on again (-want +got):\n%s", diff)
	}
}
