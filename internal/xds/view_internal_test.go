package xds

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/routing"
)

// TestUpdatesByChangeAreTheWholeView: after every change of a random sequence — entries put
// (new instances, new weights and verdicts, new incarnations), instances gone, a whole view
// now and then, streams subscribing to assignments and leaving — the resources the server
// holds, built for the clusters each change touched alone, are those Resources builds from
// the whole view: at once for the clusters and listeners and for the assignments a stream
// subscribes to, and once built (realize, what a stream subscribing does) for the others.
func TestUpdatesByChangeAreTheWholeView(t *testing.T) {
	caps := []struct{ id, provider, version, meta string }{
		{"orders.read", "db", "1.0.0", ""}, {"orders.read", "db", "1.1.0", `{"priority":2}`},
		{"orders.read", "cache", "1.0.0", ""}, {"messaging.publish", "jms", "1.0.0", ""},
	}
	rapid.Check(t, func(rt *rapid.T) {
		s, err := New(Config{Discovery: &discovery.Client{}})
		if err != nil {
			rt.Fatal(err)
		}
		view := map[entryKey]apiv1.CapabilityEntry{}
		gen := int64(0)
		result := func() *discovery.Result {
			es := make([]apiv1.CapabilityEntry, 0, len(view))
			for _, e := range view {
				es = append(es, e)
			}
			apiv1.SortCapabilityEntries(es)
			return &discovery.Result{Entries: es}
		}
		entry := func(rt *rapid.T, id string) apiv1.CapabilityEntry {
			c := caps[rapid.IntRange(0, len(caps)-1).Draw(rt, "cap")]
			gen++
			e := apiv1.CapabilityEntry{InstanceID: id, CapabilityID: c.id, Provider: c.provider, CapabilityVersion: c.version,
				Endpoint: fmt.Sprintf("http://10.0.0.%d:80%02d", rapid.IntRange(1, 3).Draw(rt, "host"), rapid.IntRange(1, 9).Draw(rt, "port")),
				Zone:     rapid.SampledFrom([]string{"", "a", "b"}).Draw(rt, "zone"), Generation: gen,
				Eligibility: rapid.SampledFrom([]string{"serving", "slow_start", "degraded", "withdrawn", "draining"}).Draw(rt, "eligibility"),
				Weight:      rapid.IntRange(0, 100).Draw(rt, "weight"), Panic: rapid.Bool().Draw(rt, "panic")}
			if c.meta != "" {
				e.Metadata = json.RawMessage(c.meta)
			}
			if rapid.IntRange(0, 9).Draw(rt, "bad endpoint") == 0 {
				e.Endpoint = "not a url"
			}
			return e
		}
		ids := []string{"i-1", "i-2", "i-3", "i-4", "i-5", "i-6"}
		// reincarnate gives some instances (drawn as label+id) a new entry in the view in
		// place of theirs, and returns the new entries
		reincarnate := func(rt *rapid.T, label string) []apiv1.CapabilityEntry {
			var out []apiv1.CapabilityEntry
			for _, id := range ids {
				if rapid.Bool().Draw(rt, label+id) {
					for k := range view {
						if k.instance == id {
							delete(view, k)
						}
					}
					e := entry(rt, id)
					view[keyOf(&e)] = e
					out = append(out, e)
				}
			}
			return out
		}
		// check holds the server's resources to the whole view's; pending: an assignment that
		// waits for a subscription may differ (no stream may subscribe to it); one whose
		// weights alone changed may wait for them (held), and differ by those alone.
		check := func(rt *rapid.T, pending bool) {
			want, err := Resources(result().Entries)
			if err != nil {
				rt.Fatal(err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for typ, rs := range want {
				if len(rs) != len(s.caps[typ]) {
					rt.Fatalf("%s: %d resources, the whole view has %d", typ, len(s.caps[typ]), len(rs))
				}
				for n, r := range rs {
					if _, later := s.pending[n]; later && typ == resourcev3.EndpointType {
						if !pending {
							rt.Fatalf("%s is still pending", n)
						}
						if s.interest.wants(n) {
							rt.Fatalf("%s is pending, and a stream subscribes to it", n)
						}
						continue // built when a stream subscribes
					}
					if _, held := s.held[n]; held && typ == resourcev3.EndpointType {
						built, now := s.index.served[n], s.index.clusters[n]
						var eps []endpoint
						for _, m := range now {
							if m.ok {
								eps = append(eps, withWeight(m.ep, 0))
							}
						}
						was := make([]endpoint, len(built))
						for i, e := range built {
							was[i] = withWeight(e, 0)
						}
						if !slices.Equal(eps, was) {
							rt.Fatalf("%s is held, and more than its weights changed:\n built %v\n   now %v", n, built, now)
						}
						continue // sent when its weights have waited, or with another change
					}
					if got := s.caps[typ][n]; !sameWire(rt, got, r) {
						rt.Fatalf("%s %s:\n got %v\nwant %v", typ, n, got, r)
					}
					if got := s.last[typ][n]; !sameWire(rt, got, r) {
						rt.Fatalf("%s %s served:\n got %v\nwant %v", typ, n, got, r)
					}
				}
			}
		}
		var clusters []string
		for _, c := range caps {
			clusters = append(clusters, ClusterName(c.id, ""), ClusterName(c.id, c.provider))
		}
		rt.Repeat(map[string]func(*rapid.T){
			"subscribe": func(rt *rapid.T) {
				id := rapid.Int64Range(1, 3).Draw(rt, "stream")
				names := rapid.SliceOfDistinct(rapid.SampledFrom(clusters), rapid.ID[string]).Draw(rt, "names")
				if rapid.IntRange(0, 9).Draw(rt, "leave") == 0 {
					s.interest.end(stream{id: id})
					return
				}
				if len(names) == 0 && rapid.Bool().Draw(rt, "no wildcard") {
					names = []string{clusters[0]}
				}
				s.onRequest(id, &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names})
			},
			"put": func(rt *rapid.T) {
				var put []apiv1.CapabilityEntry
				for range rapid.IntRange(1, 3).Draw(rt, "n") {
					e := entry(rt, rapid.SampledFrom(ids).Draw(rt, "id"))
					view[keyOf(&e)] = e
					put = append(put, e)
				}
				s.update(&discovery.Delta{Complete: true, Put: put})
			},
			"ramp": func(rt *rapid.T) {
				// a weight moves, nothing else (a slow start's step): it may wait
				keys := slices.SortedFunc(maps.Keys(view), func(a, b entryKey) int {
					return cmp.Or(cmp.Compare(a.instance, b.instance), cmp.Compare(a.capability, b.capability), cmp.Compare(a.provider, b.provider), cmp.Compare(a.version, b.version))
				})
				if len(keys) == 0 {
					return
				}
				e := view[rapid.SampledFrom(keys).Draw(rt, "entry")]
				e.Weight = rapid.IntRange(1, 100).Draw(rt, "weight")
				view[keyOf(&e)] = e
				s.update(&discovery.Delta{Complete: true, Put: []apiv1.CapabilityEntry{e}})
			},
			"gone": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				g := rapid.Int64Range(0, gen).Draw(rt, "generation")
				for k, e := range view {
					if e.InstanceID == id && e.Generation <= g {
						delete(view, k)
					}
				}
				s.update(&discovery.Delta{Complete: true, Gone: []apiv1.Removal{{InstanceID: id, Generation: g}}})
			},
			"whole of another view": func(rt *rapid.T) {
				// a new epoch, or a watcher too far behind: the whole view, changed meanwhile
				reincarnate(rt, "changed ")
				s.update(&discovery.Delta{Complete: true, Reset: true, Entries: result().Entries})
			},
			"whole": func(rt *rapid.T) {
				s.update(&discovery.Delta{Complete: true, Reset: true, Entries: result().Entries})
			},
			"warm-up reset": func(rt *rapid.T) {
				// a restarted registry answers some instances (of those the view holds, and
				// new ones), says some went; the others are kept
				answered := reincarnate(rt, "answered ")
				gone := rapid.SampledFrom(ids).Draw(rt, "gone")
				for k := range view {
					if k.instance == gone {
						delete(view, k)
					}
				}
				for i, e := range answered {
					if e.InstanceID == gone {
						answered = append(answered[:i:i], answered[i+1:]...)
						break
					}
				}
				s.update(&discovery.Delta{Reset: true, Entries: answered, Gone: []apiv1.Removal{{InstanceID: gone, Generation: gen}}})
			},
			"realize": func(rt *rapid.T) {
				s.realize(nil, true) // as a stream subscribing to every assignment does
				check(rt, false)
			},
			"weights waited": func(rt *rapid.T) {
				s.flushWeights(time.Time{}, true)
				if len(s.held) != 0 {
					rt.Fatalf("%d assignments still held after the flush", len(s.held))
				}
				check(rt, true)
			},
			"": func(rt *rapid.T) { check(rt, true) },
		})
	})
}

// sameWire reports whether a and b encode alike (deterministically): an assignment the
// server built holds its endpoints encoded (packedAssignment), one built from the whole view
// as messages.
func sameWire(rt *rapid.T, a, b proto.Message) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	enc := func(m proto.Message) []byte {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			rt.Fatal(err)
		}
		return raw
	}
	return bytes.Equal(enc(a), enc(b))
}

// BenchmarkUpdateOneChange: one change of the whole fleet's view (an instance gone, one
// registered in its place) at 60,000 instances in 600 services, each with two capabilities
// of its own (the clusters of peerbench's xDS churn): what the server does per change.
func BenchmarkUpdateOneChange(b *testing.B) {
	s, entries := benchFleet(b)
	gen := int64(len(entries))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		victim := entries[(i*7919)%len(entries)]
		gen++
		e := victim
		e.InstanceID, e.Generation = fmt.Sprintf("new-%d", i), gen
		s.update(&discovery.Delta{Complete: true, Gone: []apiv1.Removal{{InstanceID: victim.InstanceID, Generation: victim.Generation}}})
		s.update(&discovery.Delta{Complete: true, Put: []apiv1.CapabilityEntry{e}})
		entries[(i*7919)%len(entries)] = e
		i++
	}
}

// BenchmarkUpdateOneRampStep: one instance's weight moves (both its entries), the change a
// slow start makes every second for each instance ramping: under an evacuation's churn,
// some 20,000 of them a second.
func BenchmarkUpdateOneRampStep(b *testing.B) {
	s, entries := benchFleet(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := (i * 7919) % (len(entries) / 2) * 2 // an instance's two entries are next to each other
		put := []apiv1.CapabilityEntry{entries[k], entries[k+1]}
		for j := range put {
			put[j].Eligibility, put[j].Weight = "slow_start", 10+i%90
		}
		// as the registry sends it: the instance among those to drop, at its generation, and
		// its entries put again
		s.update(&discovery.Delta{Complete: true, Gone: []apiv1.Removal{{InstanceID: put[0].InstanceID, Generation: put[0].Generation}}, Put: put})
		i++
	}
}

// benchFleet is a server holding 60,000 instances of 600 services, two capabilities each,
// and the entries it holds, an instance's two next to each other. A stream subscribes to
// every assignment (as Envoy does to those of every cluster it has): each is built at each
// change.
func benchFleet(b *testing.B) (*Server, []apiv1.CapabilityEntry) {
	s, err := New(Config{Discovery: &discovery.Client{}})
	if err != nil {
		b.Fatal(err)
	}
	s.interest.set(stream{id: 1}, nil, true)
	const n, services = 60000, 600
	entries := make([]apiv1.CapabilityEntry, 0, 2*n)
	for i := range n {
		for _, c := range []string{"read", "http"} {
			entries = append(entries, apiv1.CapabilityEntry{CapabilityID: fmt.Sprintf("svc_%04d.%s", i%services, c), Provider: "db", CapabilityVersion: "1.0.0",
				InstanceID: fmt.Sprintf("i-%05d", i), Endpoint: fmt.Sprintf("http://10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255),
				Generation: int64(i + 1), Eligibility: "serving", Weight: 100})
		}
	}
	s.update(&discovery.Delta{Complete: true, Reset: true, Entries: slices.Clone(entries)})
	return s, entries
}

// TestRouteUpdatesAreTheWholeTablesResources: a sequence of routes views — instances gone and
// back, a service added, a new registry epoch — applied incrementally leaves the server with
// exactly the resources RouteResources builds from the full derivation of the last view.
func TestRouteUpdatesAreTheWholeTablesResources(t *testing.T) {
	policy := routing.Policy{}
	for i := range 4 {
		policy[fmt.Sprintf("svc-%d", i)] = []string{fmt.Sprintf("/svc-%d", i)}
	}
	s, err := New(Config{Discovery: &discovery.Client{}, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	viewOf := func(epoch string, gen int, services int, skip string) *discovery.RoutesResult {
		r := &discovery.RoutesResult{Meta: discovery.Meta{RegistryEpoch: epoch, Complete: true}}
		for sv := range services {
			svc := fmt.Sprintf("svc-%d", sv)
			for i := range 2 {
				inst := fmt.Sprintf("%s-%d", svc, i)
				if inst == skip {
					continue
				}
				r.Manifests = append(r.Manifests, apiv1.ManifestEntry{InstanceID: inst, ServiceName: svc, ServiceVersion: "1.0.0", Endpoint: fmt.Sprintf("http://10.0.%d.%d:80", sv, i),
					Generation: int64(gen + 2*sv + i), Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Version: "1.0.0", Instance: inst},
						Routes: []apiv1.ManifestRoute{{Path: "/" + svc + "/items", Methods: []string{"GET", "POST"}}, {Path: "/" + svc + "/items/{id}", Methods: []string{"GET"}}}}})
			}
		}
		return r
	}
	for i, v := range []*discovery.RoutesResult{
		viewOf("e1", 1, 2, ""), viewOf("e1", 1, 2, "svc-0-1"), viewOf("e1", 1, 3, "svc-0-1"), viewOf("e1", 1, 3, ""), viewOf("e1", 1, 1, ""), viewOf("e2", 50, 2, "svc-1-0"),
	} {
		s.updateRoutes(v)
		want := RouteResources(routing.Derive(routing.InputFromView(nil, policy, v.Manifests, v.PublicPaths)))
		s.mu.Lock()
		got := s.routes
		s.mu.Unlock()
		for _, typ := range []resourcev3.Type{resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType} {
			if len(got[typ]) != len(want[typ]) {
				t.Fatalf("view %d, %s: %d resources, want %d", i, typ, len(got[typ]), len(want[typ]))
			}
			for name, w := range want[typ] {
				if g, ok := got[typ][name]; !ok || !proto.Equal(g, w) {
					t.Errorf("view %d, %s %s: differs from the full derivation's", i, typ, name)
				}
			}
		}
	}
}
