package routing_test

import (
	"fmt"
	"testing"

	"github.com/meshflows/meshflows/routing"
)

// fleet and decoded are the package's BenchFleet and DecodedFleet (export_test.go).
var fleet, decoded = routing.BenchFleet, routing.DecodedFleet

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
