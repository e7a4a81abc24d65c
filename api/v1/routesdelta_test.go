package apiv1_test

import (
	"cmp"
	"encoding/json"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func manifestOf(id, service string, gen int64) apiv1.ManifestEntry {
	return apiv1.ManifestEntry{InstanceID: id, ServiceName: service, Generation: gen}
}

func pathOf(path, id, service string, gen int64) apiv1.PublicPath {
	return apiv1.PublicPath{Path: path, InstanceID: id, ServiceName: service, Generation: gen}
}

func TestRoutesDeltaApply(t *testing.T) {
	held := []apiv1.ManifestEntry{manifestOf("a-1", "svc-a", 1), manifestOf("b-1", "svc-b", 2), manifestOf("b-2", "svc-b", 3)}
	heldPaths := []apiv1.PublicPath{pathOf("/a", "a-1", "svc-a", 1), pathOf("/b2", "b-1", "svc-b", 2), pathOf("/b1", "b-1", "svc-b", 2)}
	for _, tc := range []struct {
		name      string
		d         apiv1.RoutesDelta
		manifests []apiv1.ManifestEntry
		paths     []apiv1.PublicPath
	}{
		{"reset", apiv1.RoutesDelta{Reset: true, Manifests: []apiv1.ManifestEntry{manifestOf("z", "svc-z", 9)}, PublicPaths: []apiv1.PublicPath{}},
			[]apiv1.ManifestEntry{manifestOf("z", "svc-z", 9)}, []apiv1.PublicPath{}},
		{"nothing", apiv1.RoutesDelta{}, held, heldPaths},
		{"an instance gone", apiv1.RoutesDelta{Removed: []apiv1.Removal{{InstanceID: "b-1", Generation: 1 << 62}}},
			[]apiv1.ManifestEntry{held[0], held[2]}, heldPaths[:1]},
		{"an older incarnation named: the held one stays", apiv1.RoutesDelta{Removed: []apiv1.Removal{{InstanceID: "b-1", Generation: 1}}},
			held, heldPaths},
		{"a new incarnation, its paths in the order sent",
			apiv1.RoutesDelta{Removed: []apiv1.Removal{{InstanceID: "b-1", Generation: 4}}, Manifests: []apiv1.ManifestEntry{manifestOf("b-1", "svc-b", 4)},
				PublicPaths: []apiv1.PublicPath{pathOf("/z", "b-1", "svc-b", 4), pathOf("/y", "b-1", "svc-b", 4)}},
			[]apiv1.ManifestEntry{held[0], manifestOf("b-1", "svc-b", 4), held[2]},
			[]apiv1.PublicPath{heldPaths[0], pathOf("/z", "b-1", "svc-b", 4), pathOf("/y", "b-1", "svc-b", 4)}},
		{"a put replaces its instance even unnamed", apiv1.RoutesDelta{Manifests: []apiv1.ManifestEntry{manifestOf("a-1", "svc-a", 5)}},
			[]apiv1.ManifestEntry{manifestOf("a-1", "svc-a", 5), held[1], held[2]}, heldPaths[1:]},
		{"new services before, between and after", apiv1.RoutesDelta{Manifests: []apiv1.ManifestEntry{manifestOf("c", "svc-c", 7), manifestOf("0", "svc-0", 6), manifestOf("a-2", "svc-a", 8)}},
			[]apiv1.ManifestEntry{manifestOf("0", "svc-0", 6), held[0], manifestOf("a-2", "svc-a", 8), held[1], held[2], manifestOf("c", "svc-c", 7)}, heldPaths},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, ps := tc.d.Apply(held, heldPaths)
			if diff := gocmp.Diff(tc.manifests, ms); diff != "" {
				t.Errorf("manifests (-want +got):\n%s", diff)
			}
			if diff := gocmp.Diff(tc.paths, ps); diff != "" {
				t.Errorf("public paths (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzRoutesDeltaApply applies arbitrary deltas (a registry's answer is untrusted input) to a
// held view: never a panic; the view stays in the answer's order; nothing of an instance
// the delta removes at or below the generation named, or puts, stays but what it puts.
func FuzzRoutesDeltaApply(f *testing.F) {
	f.Add(`{"manifests":[{"instance_id":"b","service_name":"s","generation":3}],"public_paths":[],"removed":[{"instance_id":"a","generation":9}]}`)
	f.Add(`{"reset":true,"manifests":[],"public_paths":[{"path":"/x","instance_id":"q","service_name":"t"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var d apiv1.RoutesDelta
		if json.Unmarshal([]byte(body), &d) != nil {
			return
		}
		held := []apiv1.ManifestEntry{manifestOf("a", "s", 1), manifestOf("b", "s", 2), manifestOf("c", "t", 1)}
		paths := []apiv1.PublicPath{pathOf("/a", "a", "s", 1), pathOf("/c", "c", "t", 1)}
		ms, ps := d.Apply(held, paths)
		if d.Reset {
			return
		}
		put := map[string]bool{}
		for _, m := range d.Manifests {
			put[m.InstanceID] = true
		}
		for _, p := range d.PublicPaths {
			put[p.InstanceID] = true
		}
		ordered := func(a, b [2]string) bool {
			return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1])) <= 0
		}
		for i := 1; i < len(ms); i++ {
			if !ordered([2]string{ms[i-1].ServiceName, ms[i-1].InstanceID}, [2]string{ms[i].ServiceName, ms[i].InstanceID}) {
				t.Fatalf("manifests out of order at %d: %+v", i, ms)
			}
		}
		for i := 1; i < len(ps); i++ {
			if !ordered([2]string{ps[i-1].ServiceName, ps[i-1].InstanceID}, [2]string{ps[i].ServiceName, ps[i].InstanceID}) {
				t.Fatalf("public paths out of order at %d: %+v", i, ps)
			}
		}
		kept := 0
		for _, m := range ms {
			if !put[m.InstanceID] {
				kept++
				for _, r := range d.Removed {
					if r.InstanceID == m.InstanceID && m.Generation <= r.Generation {
						t.Fatalf("%s at %d kept though removed at %d", m.InstanceID, m.Generation, r.Generation)
					}
				}
			}
		}
		if kept+len(d.Manifests) != len(ms) {
			t.Fatalf("%d manifests: %d kept and %d put", len(ms), kept, len(d.Manifests))
		}
	})
}
