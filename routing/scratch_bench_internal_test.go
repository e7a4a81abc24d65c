package routing

import (
	"encoding/json"
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// BenchmarkDeriveFreshScratch is BenchmarkDerive/services=10000/decoded with a new scratch
// each time: the first derivation of a process, before the pool holds one.
func BenchmarkDeriveFreshScratch(b *testing.B) {
	in := Input{Policy: Policy{}}
	for i := range 10000 {
		svc := fmt.Sprintf("svc-%d", i)
		in.Policy[svc] = []string{"/" + svc}
		for r := range 2 {
			inst := fmt.Sprintf("%s-%d", svc, r)
			raw, _ := json.Marshal(map[string]any{"farp": "1.0", "service": map[string]string{"name": svc, "instance": inst, "version": "1.2.3"},
				"health": map[string]any{"path": "/healthz", "interval": "5s", "unhealthy_after": 3},
				"routes": []map[string]any{
					{"path": "/" + svc + "/items", "methods": []string{"GET", "POST"}, "idempotent": []string{"GET"}},
					{"path": "/" + svc + "/items/{id}", "methods": []string{"GET", "PUT", "DELETE"}, "idempotent": []string{"GET", "PUT", "DELETE"}},
					{"path": "/" + svc + "/items/{id}/events", "methods": []string{"GET"}},
					{"path": "/" + svc + "/search", "methods": []string{"GET"}},
					{"path": "/" + svc + "/files/{rest...}", "methods": []string{"GET"}},
				}})
			var m apiv1.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
			in.Manifests = append(in.Manifests, ManifestInput{Generation: int64(i*2 + r + 1), Endpoint: "http://" + inst + ":8080", Parsed: &m})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		derive(in, new(scratch))
	}
}
