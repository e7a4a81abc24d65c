package routing_test

import (
	"encoding/json"
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// fleet builds n services, each with two instances and a manifest of five routes under its
// own prefix, and the policy that grants them.
func fleet(n int) routing.Input {
	in := routing.Input{Policy: routing.Policy{}}
	for i := range n {
		svc := fmt.Sprintf("svc-%d", i)
		in.Policy[svc] = []string{"/" + svc}
		for r := range 2 {
			inst := fmt.Sprintf("%s-%d", svc, r)
			man := map[string]any{"farp": "1.0", "service": map[string]string{"name": svc, "instance": inst, "version": "1.2.3"},
				"health": map[string]any{"path": "/healthz", "interval": "5s", "unhealthy_after": 3},
				"routes": []map[string]any{
					{"path": "/" + svc + "/items", "methods": []string{"GET", "POST"}, "idempotent": []string{"GET"}},
					{"path": "/" + svc + "/items/{id}", "methods": []string{"GET", "PUT", "DELETE"}, "idempotent": []string{"GET", "PUT", "DELETE"}},
					{"path": "/" + svc + "/items/{id}/events", "methods": []string{"GET"}},
					{"path": "/" + svc + "/search", "methods": []string{"GET"}},
					{"path": "/" + svc + "/files/{rest...}", "methods": []string{"GET"}},
				}}
			raw, _ := json.Marshal(man)
			in.Manifests = append(in.Manifests, routing.ManifestInput{Generation: int64(i*2 + r + 1), Endpoint: "http://" + inst + ":8080", Manifest: raw})
		}
	}
	return in
}

// decoded is in with its manifests decoded, as a gateway holds them.
func decoded(tb testing.TB, in routing.Input) routing.Input {
	tb.Helper()
	out := in
	out.Manifests = make([]routing.ManifestInput, len(in.Manifests))
	for i, m := range in.Manifests {
		var man apiv1.Manifest
		if err := json.Unmarshal(m.Manifest, &man); err != nil {
			tb.Fatal(err)
		}
		out.Manifests[i] = routing.ManifestInput{Generation: m.Generation, Endpoint: m.Endpoint, Parsed: &man}
	}
	return out
}

// BenchmarkDerive derives the full table from manifests as a gateway holds them (decoded
// by the discovery client) and, for comparison, from raw JSON (routes derive, a case file).
func BenchmarkDerive(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		raw := fleet(n)
		parsed := decoded(b, raw)
		for name, in := range map[string]routing.Input{"decoded": parsed, "json": raw} {
			b.Run(fmt.Sprintf("services=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					routing.Derive(in)
				}
			})
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{2, 2000} { // 5 routes per service: 10 and 10,000 routes
		t := routing.Derive(fleet(n))
		paths := []string{"/svc-1/items/42", "/svc-1/files/a/b/c", "/svc-1/search"}
		b.Run(fmt.Sprintf("routes=%d", len(t.Entries())), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if m := t.Match("GET", paths[i%len(paths)]); m.Entry == nil {
					b.Fatal("no match")
				}
				i++
			}
		})
	}
}

// FuzzMatch: no request path panics the matcher, and a match's pattern really is a route.
func FuzzMatch(f *testing.F) {
	t := routing.Derive(fleet(3))
	for _, p := range []string{"/svc-1/items/42", "//svc-1/./files/../items", "", "/", "/svc-2/files", "%2F..%2F"} {
		f.Add("GET", p)
	}
	f.Fuzz(func(tt *testing.T, method, path string) {
		m := t.Match(method, path)
		if m.Entry != nil && m.Entry.Method != method {
			tt.Fatalf("Match(%q, %q) returned a %s route", method, path, m.Entry.Method)
		}
		if m.Entry == nil && m.Status != 404 && m.Status != 405 {
			tt.Fatalf("Match(%q, %q) = status %d", method, path, m.Status)
		}
	})
}
