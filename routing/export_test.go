package routing

import (
	"encoding/json"
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// BenchFleet builds n services, each with two instances and a manifest of five routes under its
// own prefix, and the policy that grants them.
func BenchFleet(n int) Input {
	in := Input{Policy: Policy{}}
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
			in.Manifests = append(in.Manifests, ManifestInput{Generation: int64(i*2 + r + 1), Endpoint: "http://" + inst + ":8080", Manifest: raw})
		}
	}
	return in
}

// DecodedFleet is in with its manifests decoded, as a gateway holds them.
func DecodedFleet(tb testing.TB, in Input) Input {
	tb.Helper()
	out := in
	out.Manifests = make([]ManifestInput, len(in.Manifests))
	for i, m := range in.Manifests {
		var man apiv1.Manifest
		if err := json.Unmarshal(m.Manifest, &man); err != nil {
			tb.Fatal(err)
		}
		out.Manifests[i] = ManifestInput{Generation: m.Generation, Endpoint: m.Endpoint, Parsed: &man}
	}
	return out
}
