package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// routesWatcher is a delta watch of the routes view: what it holds and at which revision.
type routesWatcher struct {
	epoch     string
	revision  int64
	manifests []apiv1.ManifestEntry
	paths     []apiv1.PublicPath
	resets    int
}

// poll asks for the changes since what w holds (answered at once) and applies them.
func (w *routesWatcher) poll(t fataler, base string) {
	t.Helper()
	v := url.Values{"delta": {"true"}, "index": {fmt.Sprint(w.revision)}, "wait": {"1ns"}}
	if w.epoch != "" {
		v.Set("epoch", w.epoch)
	}
	var d apiv1.RoutesDelta
	getJSON(t, base+"/v1/discovery/routes?"+v.Encode(), &d)
	if d.Revision < w.revision && d.RegistryEpoch == w.epoch {
		t.Fatalf("routes delta at revision %d after %d", d.Revision, w.revision)
	}
	if d.Manifests == nil || d.PublicPaths == nil || d.Removed == nil && !d.Reset {
		t.Fatalf("a routes delta writes manifests, public_paths and removed, even empty: %+v", d)
	}
	if d.Reset && w.revision > 0 {
		w.resets++
	}
	w.manifests, w.paths = d.Apply(w.manifests, w.paths)
	w.epoch, w.revision = d.RegistryEpoch, d.Revision
}

// routedRequest registers id in service with a manifest (when manifest) of routes, and
// capabilities that declare paths public.
func routedRequest(id, service string, manifest bool, routes []string, paths [][]string) *apiv1.RegisterRequest {
	req := &apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080"}
	for i, ps := range paths {
		meta, _ := json.Marshal(map[string]any{"public_paths": ps})
		req.Capabilities = append(req.Capabilities, apiv1.Capability{CapabilityID: fmt.Sprintf("cap.c%d", i), Provider: "p",
			CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Metadata: meta})
	}
	if len(req.Capabilities) == 0 {
		req.Capabilities = []apiv1.Capability{{CapabilityID: "cap.plain", Provider: "p", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"}}
	}
	if manifest {
		req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: service, Instance: id, Version: "1.0.0"}, Routes: []apiv1.ManifestRoute{}}
		for _, r := range routes {
			req.Manifest.Routes = append(req.Manifest.Routes, apiv1.ManifestRoute{Path: r, Methods: []string{"GET"}})
		}
	}
	return req
}

// TestRoutesDeltaWatchEqualsTheFullAnswer: after every change of a random sequence —
// registrations (new instances, and new incarnations that change service, manifest or public
// paths, or publish neither), deregistrations, self-reports and outcomes that change
// verdicts, time that ramps, ends leases and the warm-up — a routes delta watcher's view,
// built from the deltas alone, equals the full routes answer at the same revision, in the
// same order.
func TestRoutesDeltaWatchEqualsTheFullAnswer(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := newDeltaServer(t)
		defer s.Close()
		gens := map[string]int64{}
		eager, lazy := &routesWatcher{}, &routesWatcher{}
		check := func(rt *rapid.T, w *routesWatcher) {
			w.poll(rt, s.URL)
			var full apiv1.RoutesResponse
			getJSON(rt, s.URL+"/v1/discovery/routes", &full)
			if full.Revision != w.revision {
				rt.Fatalf("the full answer is at %d, the delta at %d", full.Revision, w.revision)
			}
			if diff := cmp.Diff(full.Manifests, w.manifests); diff != "" {
				rt.Fatalf("at %d: the delta watcher's manifests differ from the full answer's (-full +delta):\n%s", w.revision, diff)
			}
			if diff := cmp.Diff(full.PublicPaths, w.paths); diff != "" {
				rt.Fatalf("at %d: the delta watcher's public paths differ from the full answer's (-full +delta):\n%s", w.revision, diff)
			}
		}
		ids := []string{"i-1", "i-2", "i-3", "i-4", "i-5", "i-6"}
		pathSets := [][]string{{}, {"/a"}, {"/b", "/a"}, {"/c"}}
		actions := fleetActions(s, gens, ids)
		maps.Copy(actions, map[string]func(*rapid.T){
			"register": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				service := rapid.SampledFrom([]string{"svc-a", "svc-b", "svc-c"}).Draw(rt, "service")
				var paths [][]string
				for range rapid.IntRange(0, 2).Draw(rt, "capabilities") {
					paths = append(paths, rapid.SampledFrom(pathSets).Draw(rt, "paths"))
				}
				registerDrawn(rt, s, gens, routedRequest(id, service, rapid.Bool().Draw(rt, "manifest"), rapid.SampledFrom(pathSets).Draw(rt, "routes"), paths))
			},
			"lazy watcher polls": func(rt *rapid.T) { check(rt, lazy) },
			"":                   func(rt *rapid.T) { check(rt, eager) },
		})
		rt.Repeat(actions)
	})
}

// TestRoutesDeltaWatchResets: a routes watcher of another epoch, ahead of the registry or
// at index 0 gets the whole view with reset; a current one gets the instance that changed
// alone.
func TestRoutesDeltaWatchResets(t *testing.T) {
	s := newDeltaServer(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.Registry.Register(ctx, routedRequest(fmt.Sprintf("i-%d", i), "svc-a", true, []string{"/r"}, [][]string{{"/p"}})); err != nil {
			t.Fatal(err)
		}
	}
	w := &routesWatcher{}
	w.poll(t, s.URL)
	if len(w.manifests) != 5 || len(w.paths) != 5 {
		t.Fatalf("the first answer holds %d manifests and %d paths, want 5 of each", len(w.manifests), len(w.paths))
	}
	for _, tc := range untoldIndexes(w.revision) {
		var d apiv1.RoutesDelta
		getJSON(t, s.URL+"/v1/discovery/routes?delta=true&wait=1ns"+tc.params, &d)
		if !d.Reset || len(d.Manifests) != 5 || len(d.PublicPaths) != 5 {
			t.Errorf("%s: reset %v with %d manifests, want a reset with the 5", tc.name, d.Reset, len(d.Manifests))
		}
	}
	if _, err := s.Registry.Register(ctx, routedRequest("i-new", "svc-0", true, []string{"/r"}, [][]string{{"/p", "/q"}})); err != nil {
		t.Fatal(err)
	}
	var d apiv1.RoutesDelta
	getJSON(t, s.URL+fmt.Sprintf("/v1/discovery/routes?delta=true&wait=1ns&index=%d&epoch=%s", w.revision, w.epoch), &d)
	if d.Reset || len(d.Manifests) != 1 || len(d.PublicPaths) != 2 || len(d.Removed) != 1 || d.Removed[0].InstanceID != "i-new" {
		t.Errorf("after one registration: %+v, want i-new alone", d)
	}
	w.poll(t, s.URL)
	if w.manifests[0].InstanceID != "i-new" || w.paths[0].InstanceID != "i-new" || w.paths[1].Path != "/q" {
		t.Errorf("i-new of svc-0 is not first in the view, its paths in order: %+v", w.paths)
	}
}

// BenchmarkRoutesWatch: what a gateway's watch of the routes view costs the registry per
// change at 5,000 route inputs (each instance a manifest and a public path): the whole view
// again, or the delta of the instance that changed.
func BenchmarkRoutesWatch(b *testing.B) {
	const n = 5000
	s := registrytest.NewServerWith(b, registry.Config{}, server.Config{}, registrytest.Epoch0)
	ctx := context.Background()
	reqs := make([]*apiv1.RegisterRequest, n)
	for i := range n {
		reqs[i] = routedRequest(fmt.Sprintf("i-%d", i), fmt.Sprintf("svc-%d", i/50), true, []string{fmt.Sprintf("/r/%d", i/50)}, [][]string{{fmt.Sprintf("/p/%d", i/50)}})
		if _, err := s.Registry.Register(ctx, reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	for _, delta := range []bool{false, true} {
		b.Run(fmt.Sprintf("delta=%v", delta), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				rev := s.Registry.State().Revision
				if _, err := s.Registry.Register(ctx, reqs[i%n]); err != nil {
					b.Fatal(err)
				}
				target := "/v1/discovery/routes"
				if delta {
					target += fmt.Sprintf("?delta=true&wait=1ns&index=%d", rev)
				}
				w := serve(b, s.Config.Handler, "GET", target, nil, 200)
				b.ReportMetric(float64(w.Body.Len()), "answer-bytes")
				i++
			}
		})
	}
}
