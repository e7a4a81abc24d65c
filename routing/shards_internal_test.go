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
		testShards = shards
		defer func() { testShards = 0 }()
		tab := Derive(in)
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
		if got, want := granted(path, []string{prefix}), grantedReference(segs, prefix); got != want {
			t.Fatalf("granted(%q, %q) = %v, the segment test says %v", path, prefix, got, want)
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
