package routing_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// The pools the generated changes draw from are small on purpose, so that changes collide:
// shared paths and keys, equal versions and weights, ".." and malformed paths, claims
// outside the policy, prerelease versions, methods listed twice.
var (
	genServices  = []string{"svc-a", "svc-b", "svc-c"}
	genVersions  = []string{"1.0.0", "1.0.0", "1.2.0", "2.0.0-rc.1", "2.0.0", "1.0"}
	genPaths     = []string{"/a/x", "/a/{id}", "/a/{name}", "/a/{rest...}", "/a/x/y", "/b/y", "/b/{k}/z", "/a/../b/y", "/a//x", "a/x", "/c", "/", "/a/x/"}
	genMethods   = []string{"GET", "POST", "PUT", "DELETE", "HEAD", "GET"}
	genPrefixes  = []string{"/a", "/b", "/", "/a/x", "/c", "/a/{id}"}
	genInstances = []string{"i0", "i1", "i2", "i3", "i4", "i5"}
	genRequests  = []string{"/a/x", "/a/q", "/a/x/y", "/a/x/y/z", "/b/y", "/b/1/z", "/c", "/", "/a/../b/y", "/zz"}
)

// model is the input the changes have made, kept as Derive takes it.
type model struct {
	manifests map[string]routing.ManifestInput
	aliases   map[string]routing.Alias
	policy    routing.Policy
	static    []routing.StaticRoute
	gen       int64 // generations are unique, as the registry hands them out
}

func (m *model) input(shuffle *rand.Rand) routing.Input {
	in := routing.Input{Static: m.static, Policy: m.policy}
	for _, mi := range m.manifests {
		in.Manifests = append(in.Manifests, mi)
	}
	for _, a := range m.aliases {
		in.Aliases = append(in.Aliases, a)
	}
	sortInput(&in)
	if shuffle != nil {
		shuffle.Shuffle(len(in.Manifests), func(i, j int) { in.Manifests[i], in.Manifests[j] = in.Manifests[j], in.Manifests[i] })
		shuffle.Shuffle(len(in.Aliases), func(i, j int) { in.Aliases[i], in.Aliases[j] = in.Aliases[j], in.Aliases[i] })
	}
	return in
}

func sortInput(in *routing.Input) {
	slices.SortFunc(in.Manifests, func(a, b routing.ManifestInput) int { return int(a.Generation - b.Generation) })
	slices.SortFunc(in.Aliases, func(a, b routing.Alias) int { return int(a.Generation - b.Generation) })
}

func aliasKey(a routing.Alias) string { return a.Path + "|" + a.CapabilityID + "|" + a.Instance }

// canonicalJSON is a table's canonical form, byte for byte.
func canonicalJSON(t interface{ Fatalf(string, ...any) }, tb *routing.Table) string {
	b, err := json.Marshal(tb.Canonical())
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

// matches is what every probe request matches, for every method.
func matches(tb *routing.Table) string {
	var out []routing.MatchOutcome
	for _, p := range genRequests {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "HEAD"} {
			out = append(out, tb.Match(m, p).Outcome())
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

func drawManifest(rt *rapid.T, m *model, id string) routing.ManifestInput {
	m.gen++
	service := rapid.SampledFrom(genServices).Draw(rt, "service")
	man := apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: service, Version: rapid.SampledFrom(genVersions).Draw(rt, "version"), Instance: id}}
	for range rapid.IntRange(0, 3).Draw(rt, "routes") {
		r := apiv1.ManifestRoute{Path: rapid.SampledFrom(genPaths).Draw(rt, "path")}
		r.Methods = rapid.SliceOfN(rapid.SampledFrom(genMethods), 1, 3).Draw(rt, "methods")
		if rapid.Bool().Draw(rt, "idempotent") {
			r.Idempotent = []string{rapid.SampledFrom(genMethods).Draw(rt, "idem")}
		}
		if rapid.Bool().Draw(rt, "weighted") {
			r.Weight = apiv1.Int(int64(rapid.SampledFrom([]int{0, 50, 100, 150, 1000, -1}).Draw(rt, "weight")))
		}
		if rapid.IntRange(0, 4).Draw(rt, "schema") == 0 {
			r.Schema = "#/s"
		}
		man.Routes = append(man.Routes, r)
	}
	mi := routing.ManifestInput{InstanceID: id, Generation: m.gen, Endpoint: "http://" + id + ":8080"}
	if rapid.Bool().Draw(rt, "parsed") {
		mi.Parsed = &man
	} else {
		mi.Manifest, _ = json.Marshal(man)
	}
	return mi
}

func drawAlias(rt *rapid.T, m *model) routing.Alias {
	m.gen++
	id := rapid.SampledFrom(genInstances).Draw(rt, "instance")
	return routing.Alias{Path: rapid.SampledFrom(genPaths).Draw(rt, "path"), CapabilityID: rapid.SampledFrom([]string{"cap.a", "cap.b"}).Draw(rt, "capability"),
		Service: rapid.SampledFrom(genServices).Draw(rt, "service"), Version: rapid.SampledFrom(genVersions).Draw(rt, "version"),
		Instance: id, Endpoint: "http://" + id + ":8080", Generation: m.gen}
}

func drawStatic(rt *rapid.T) []routing.StaticRoute {
	var out []routing.StaticRoute
	seen := map[string]bool{}
	for range rapid.IntRange(0, 2).Draw(rt, "statics") {
		p := rapid.SampledFrom([]string{"/a/x", "/b/y", "/a/{id}", "/static"}).Draw(rt, "static path")
		meth := rapid.SampledFrom([]string{"GET", "POST"}).Draw(rt, "static method")
		segs, _ := apiv1.ParsePath(p)
		if k := routing.Key(segs) + meth; !seen[k] {
			seen[k] = true
			out = append(out, routing.StaticRoute{Path: p, Methods: []string{meth}, Upstream: "http://static:9000"})
		}
	}
	return out
}

// rowsOf indexes a table's routes by (key, method).
func rowsOf(tb *routing.Table) map[[2]string]string {
	out := map[[2]string]string{}
	for _, e := range tb.Entries() {
		b, _ := json.Marshal(e.Route)
		out[[2]string{e.Key, e.Method}] = string(b) + fmt.Sprint(e.Upstreams, e.Rewrite)
	}
	return out
}

// TestDeriverEqualsDerive is the conformance argument of the incremental derivation, run: after
// every change of a random sequence — manifests added, replaced and withdrawn, public paths,
// policy changes, static routes, a change applied twice, a change and its inverse — the
// Deriver's table equals Derive of the input the changes left, byte for byte in canonical
// form and request for request; Derive of that input shuffled is the same table; the rows the
// change reported are exactly those that differ; and a change undone restores the table.
func TestDeriverEqualsDerive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &model{manifests: map[string]routing.ManifestInput{}, aliases: map[string]routing.Alias{}, policy: routing.Policy{}}
		for _, s := range genServices[:2] {
			m.policy[s] = []string{rapid.SampledFrom(genPrefixes).Draw(rt, "initial prefix")}
		}
		d := routing.NewDeriver(m.input(nil))
		shuffle := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "shuffle seed"), 1))
		check := func(rt *rapid.T, before *routing.Table, tb *routing.Table, changed []routing.RowChange) {
			want := routing.Derive(m.input(nil))
			if got, w := canonicalJSON(rt, tb), canonicalJSON(rt, want); got != w {
				rt.Fatalf("incremental table differs from Derive:\n%s", cmp.Diff(w, got))
			}
			if got, w := matches(tb), matches(want); got != w {
				rt.Fatalf("incremental matches differ from Derive's:\n%s", cmp.Diff(w, got))
			}
			if s := canonicalJSON(rt, routing.Derive(m.input(shuffle))); s != canonicalJSON(rt, want) {
				rt.Fatalf("Derive of the shuffled input differs:\n%s", cmp.Diff(canonicalJSON(rt, want), s))
			}
			old, now := rowsOf(before), rowsOf(tb)
			var diff []string
			for k, v := range now {
				if old[k] != v {
					diff = append(diff, k[0]+" "+k[1])
				}
			}
			for k := range old {
				if _, ok := now[k]; !ok {
					diff = append(diff, k[0]+" "+k[1])
				}
			}
			var reported []string
			for _, c := range changed {
				reported = append(reported, c.Key+" "+c.Method)
			}
			slices.Sort(diff)
			slices.Sort(reported)
			if !slices.Equal(diff, reported) {
				rt.Fatalf("rows changed %v, reported %v", diff, reported)
			}
		}
		apply := func(rt *rapid.T, cs ...routing.Change) {
			before := d.Table()
			tb, changed := d.Apply(cs...)
			check(rt, before, tb, changed)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"put manifest": func(rt *rapid.T) {
				mi := drawManifest(rt, m, rapid.SampledFrom(genInstances).Draw(rt, "instance"))
				m.manifests[mi.InstanceID] = mi
				apply(rt, routing.Change{PutManifest: &mi})
			},
			"delete manifest": func(rt *rapid.T) {
				id := rapid.SampledFrom(genInstances).Draw(rt, "instance")
				delete(m.manifests, id)
				apply(rt, routing.Change{DeleteManifest: id})
			},
			"put alias": func(rt *rapid.T) {
				a := drawAlias(rt, m)
				m.aliases[aliasKey(a)] = a
				apply(rt, routing.Change{PutAlias: &a})
			},
			"delete alias": func(rt *rapid.T) {
				a := drawAlias(rt, m) // none yet: withdrawing one the input lacks changes nothing
				if len(m.aliases) > 0 {
					keys := slices.Sorted(mapKeys(m.aliases))
					a = m.aliases[rapid.SampledFrom(keys).Draw(rt, "alias")]
				}
				delete(m.aliases, aliasKey(a))
				apply(rt, routing.Change{DeleteAlias: &a})
			},
			"policy": func(rt *rapid.T) {
				s := rapid.SampledFrom(genServices).Draw(rt, "service")
				var prefixes []string
				if rapid.IntRange(0, 3).Draw(rt, "revoke") > 0 {
					prefixes = rapid.SliceOfN(rapid.SampledFrom(genPrefixes), 1, 2).Draw(rt, "prefixes")
					m.policy[s] = prefixes
				} else {
					delete(m.policy, s)
				}
				apply(rt, routing.Change{Policy: &routing.PolicyChange{Service: s, Prefixes: prefixes}})
			},
			"static": func(rt *rapid.T) {
				st := drawStatic(rt)
				m.static = st
				apply(rt, routing.Change{Static: &st})
			},
			"twice": func(rt *rapid.T) { // a change applied twice is the change applied once
				mi := drawManifest(rt, m, rapid.SampledFrom(genInstances).Draw(rt, "instance"))
				m.manifests[mi.InstanceID] = mi
				apply(rt, routing.Change{PutManifest: &mi}, routing.Change{PutManifest: &mi})
			},
			"and back": func(rt *rapid.T) { // a new instance and its withdrawal restore the table
				before := canonicalJSON(rt, d.Table())
				mi := drawManifest(rt, m, "i-new")
				d.Apply(routing.Change{PutManifest: &mi})
				tb, _ := d.Apply(routing.Change{DeleteManifest: "i-new"})
				if got := canonicalJSON(rt, tb); got != before {
					rt.Fatalf("a manifest added and withdrawn left:\n%s", cmp.Diff(before, got))
				}
			},
		})
	})
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestConformanceCasesThroughTheDeriver: every case file, its manifests added to a Deriver one
// at a time in shuffled orders, gives the case's table and matches.
func TestConformanceCasesThroughTheDeriver(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "conformance", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no case files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := routing.ParseCase(data)
			if err != nil {
				t.Fatal(err)
			}
			js := func(o routing.Output) string { b, _ := json.MarshalIndent(o, "", " "); return string(b) }
			want := js(c.Run())
			for seed := range uint64(5) {
				out, err := c.RunIncremental(seed, 0)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, js(out)); diff != "" {
					t.Errorf("seed %d: incremental (-full +incremental):\n%s", seed, diff)
				}
				out, err = c.RunIncremental(seed, 5)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, js(out)); diff != "" {
					t.Errorf("seed %d, churn 5: incremental (-full +incremental):\n%s", seed, diff)
				}
			}
		})
	}
}

// TestRegressionsThePropertyFound: the two orders of Derive that hung on its input's, each
// as the minimal input the property test shrank it to.
func TestRegressionsThePropertyFound(t *testing.T) {
	policy := routing.Policy{"svc-b": {"/a/{id}"}}
	// two public paths of one path and instance, both rejected: listed in one order whatever
	// the order they came in
	aliases := []routing.Alias{
		{Path: "/a/{rest...}", CapabilityID: "cap.a", Service: "svc-a", Version: "1.0.0", Instance: "i3", Endpoint: "http://i3:8080", Generation: 1},
		{Path: "/a/{rest...}", CapabilityID: "cap.a", Service: "svc-b", Version: "1.0.0", Instance: "i3", Endpoint: "http://i3:8080", Generation: 2},
	}
	a := canonicalJSON(t, routing.Derive(routing.Input{Policy: policy, Aliases: aliases}))
	b := canonicalJSON(t, routing.Derive(routing.Input{Policy: policy, Aliases: []routing.Alias{aliases[1], aliases[0]}}))
	if a != b {
		t.Errorf("rejected public paths depend on their order:\n%s\n%s", a, b)
	}
	// one group claiming a path by a manifest route and by a public path: the rewrite is its
	// newest claim's, whatever came first
	granted := routing.Policy{"svc-a": {"/"}}
	man := &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "svc-a", Version: "1.0.0", Instance: "i1"},
		Routes: []apiv1.ManifestRoute{{Path: "/a/x", Methods: []string{"POST"}}}}
	mi := routing.ManifestInput{InstanceID: "i1", Generation: 5, Endpoint: "http://i1:8080", Parsed: man}
	alias := routing.Alias{Path: "/a/x", CapabilityID: "cap.a", Service: "svc-a", Version: "1.0.0", Instance: "i2", Endpoint: "http://i2:8080", Generation: 9}
	tb := routing.Derive(routing.Input{Policy: granted, Manifests: []routing.ManifestInput{mi}, Aliases: []routing.Alias{alias}})
	if es := tb.Entries(); len(es) != 1 || es[0].Rewrite != apiv1.InvokePath("cap.a") {
		t.Errorf("the newest claim is the public path's: want its rewrite, got %+v", es)
	}
}
