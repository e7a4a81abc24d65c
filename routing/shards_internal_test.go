package routing

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// TestShardsDeriveAlike: grouping the claims in one shard or in several (then merging the
// sorted shares), and building the entries in one part or several, give the same table and
// the same matches. The input has enough path keys for several parts.
func TestShardsDeriveAlike(t *testing.T) {
	in := Input{Policy: Policy{}, Static: []StaticRoute{{Path: "/svc-7/items", Methods: []string{"GET"}, Upstream: "http://static:80"}}}
	const services = minParallelSlots + 1 // two path keys each: just over two parts of entries
	for i := range 2 * services {
		svc := fmt.Sprintf("svc-%d", i%services) // two versions of each service
		in.Policy[svc] = []string{"/" + svc, "/shared"}
		ver := fmt.Sprintf("1.%d.0", i/services)
		for r := range 2 {
			inst := fmt.Sprintf("%s-%s-%d", svc, ver, r)
			m := &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Instance: inst, Version: ver},
				Routes: []apiv1.ManifestRoute{
					{Path: "/" + svc + "/items", Methods: []string{"GET", "POST"}, Idempotent: []string{"GET"}},
					{Path: "/" + svc + "/items/{id}", Methods: []string{"GET", "PUT", "DELETE"}},
					{Path: "/shared/{rest...}", Methods: []string{"GET"}}, // everyone claims it: conflicts
				}}
			raw, _ := json.Marshal(m)
			in.Manifests = append(in.Manifests, ManifestInput{Generation: int64(i*2 + r + 1), Endpoint: "http://" + inst, Manifest: raw, Parsed: m})
		}
	}
	derive := func(shards int) (Canonical, []MatchOutcome) {
		tab := derive(in, new(scratch), shards)
		// Every route's path, and one segment deeper, with every method: the tries each
		// part compiled and merged answer all of them as the one trie does.
		paths := []string{"/shared/a/b", "/nope", "/"}
		for _, e := range tab.Entries() {
			p := strings.NewReplacer("{}", "v", "{...}", "a/b").Replace(e.Key)
			paths = append(paths, p, p+"/x")
		}
		var ms []MatchOutcome
		for _, p := range paths {
			for _, m := range apiv1.Methods {
				ms = append(ms, tab.Match(m, p).Outcome())
			}
		}
		return tab.Canonical(), ms
	}
	one, m1 := derive(1)
	for _, n := range []int{2, 3} {
		got, mn := derive(n)
		if diff := cmp.Diff(one, got, cmp.AllowUnexported(Conflict{})); diff != "" {
			t.Errorf("%d shards (-one +sharded):\n%s", n, diff)
		}
		if diff := cmp.Diff(m1, mn); diff != "" {
			t.Errorf("%d shards, matches (-one +sharded):\n%s", n, diff)
		}
	}
	if len(one.Conflicts) == 0 || len(one.Routes) < 4*services {
		t.Errorf("the input is not the one meant: %d routes, %d conflicts", len(one.Routes), len(one.Conflicts))
	}
}

// FuzzGranted compares the text test of a route path against a policy prefix with the
// test on parsed segments it replaced: a prefix of literal segments (a trailing "/"
// ignored, "/" for everything) contains the paths whose leading segments are its own.
func FuzzGranted(f *testing.F) {
	for _, c := range [][2]string{{"/a/b", "/a"}, {"/ab", "/a"}, {"/a", "/a/"}, {"/", "/"}, {"/a/{id}", "/a/{id}"}, {"/a", "//"}, {"/a", ""}, {"/a/b", "/a//"}, {"/a/{x}/c", "/a/{x"}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, path, prefix string) {
		segs, err := apiv1.ParsePath(path)
		if err != nil {
			return // granted is asked only about valid route paths
		}
		if got, want := Granted(path, []string{prefix}), grantedReference(segs, prefix); got != want {
			t.Fatalf("Granted(%q, %q) = %v, the segment test says %v", path, prefix, got, want)
		}
	})
}

func grantedReference(path []apiv1.Segment, prefix string) bool {
	if prefix == "/" {
		return true
	}
	pre, err := apiv1.ParsePath(strings.TrimSuffix(prefix, "/"))
	if err != nil || len(pre) > len(path) {
		return false
	}
	for i, p := range pre {
		if p.Kind != apiv1.Literal || path[i].Kind != apiv1.Literal || path[i].Value != p.Value {
			return false
		}
	}
	return true
}

// TestScratchReuse: a derivation that reuses the scratch of another gives the table a
// fresh scratch gives, and leaves the tables derived before it as they were.
func TestScratchReuse(t *testing.T) {
	fleet := func(services, routes int, prefix string) Input {
		in := Input{Policy: Policy{}}
		for i := range services {
			svc := fmt.Sprintf("%s-%d", prefix, i)
			in.Policy[svc] = []string{"/" + svc}
			for r := range 2 {
				m := &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Instance: fmt.Sprintf("%s-%d", svc, r), Version: "1.0.0"}}
				for k := range routes {
					m.Routes = append(m.Routes, apiv1.ManifestRoute{Path: fmt.Sprintf("/%s/r%d/{id}", svc, k), Methods: []string{"GET", "PUT"}})
				}
				in.Manifests = append(in.Manifests, ManifestInput{Generation: int64(2*i + r + 1), Endpoint: "http://" + m.Service.Instance, Parsed: m})
			}
		}
		return in
	}
	look := func(tab *Table) (Canonical, []MatchOutcome) {
		var ms []MatchOutcome
		for _, e := range tab.Entries() {
			ms = append(ms, tab.Match(e.Method, strings.ReplaceAll(e.Key, "{}", "7")).Outcome())
		}
		return tab.Canonical(), ms
	}
	big, small := fleet(3000, 3, "big"), fleet(40, 5, "small") // enough for the workers and shards of 2 cores
	var sc scratch
	first := derive(big, &sc, 0)
	c1, m1 := look(first)
	sc.reuse()
	second := derive(small, &sc, 0)
	sc.reuse()
	third := derive(big, &sc, 0)
	if c, m := look(first); !cmp.Equal(c, c1, cmp.AllowUnexported(Conflict{})) || !cmp.Equal(m, m1) {
		t.Error("deriving again with the scratch changed an earlier table")
	}
	if c, m := look(third); !cmp.Equal(c, c1, cmp.AllowUnexported(Conflict{})) || !cmp.Equal(m, m1) {
		t.Error("a derivation on a used scratch differs from one on a fresh scratch")
	}
	if c, _ := look(second); !cmp.Equal(c, Derive(small).Canonical(), cmp.AllowUnexported(Conflict{})) {
		t.Error("the small table differs when derived on a used scratch")
	}
}
