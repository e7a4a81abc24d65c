package routing_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/routing"
)

// TestReplicasAnalysedOnceDeriveAlike: manifests a gateway holds decoded are analysed once
// per replica set; the table must be the one derived from raw JSON, where every manifest is
// analysed on its own — seniority from the oldest replica, each replica's rejection under its
// own instance, and replicas that differ in one field kept apart.
func TestReplicasAnalysedOnceDeriveAlike(t *testing.T) {
	man := func(svc, inst, path string, idem []string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"farp": "1.0", "service": map[string]string{"name": svc, "instance": inst, "version": "1.0.0"},
			"routes": []map[string]any{{"path": path, "methods": []string{"GET", "PUT"}, "idempotent": idem}}})
		return b
	}
	raw := routing.Input{Policy: routing.Policy{"a": {"/x"}, "b": {"/x"}, "c": {"/y"}}, Manifests: []routing.ManifestInput{
		{Generation: 5, Endpoint: "http://a1", Manifest: man("a", "a-1", "/x/{id}", []string{"GET"})},
		{Generation: 2, Endpoint: "http://a2", Manifest: man("a", "a-2", "/x/{id}", []string{"GET"})}, // the oldest of a
		{Generation: 3, Endpoint: "http://b1", Manifest: man("b", "b-1", "/x/{id}", []string{"GET"})},
		{Generation: 4, Endpoint: "http://b2", Manifest: man("b", "b-2", "/x/{id}", []string{"GET", "PUT"})}, // differs: idempotent PUT
		{Generation: 6, Endpoint: "http://c1", Manifest: man("c", "c-1", "/z/outside", nil)},                 // outside c's prefix
		{Generation: 7, Endpoint: "http://c2", Manifest: man("c", "c-2", "/z/outside", nil)},
	}}
	want, got := routing.Derive(raw).Canonical(), routing.Derive(decoded(t, raw)).Canonical()
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(routing.Conflict{})); diff != "" {
		t.Errorf("decoded (-raw +decoded):\n%s", diff)
	}
	if len(want.Rejected) != 2 || want.Routes[0].Service != "a" {
		t.Errorf("the reference itself: %+v", want)
	}
}
