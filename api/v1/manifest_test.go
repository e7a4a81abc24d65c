package apiv1_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestManifestProblems(t *testing.T) {
	const base = `{"farp":"1.0","service":{"name":"assets","instance":"assets-1","version":"2.3.0"},
		"health":{"path":"/healthz","interval":"5s","unhealthy_after":3},
		"routes":[{"path":"/v2/assets/{id}","methods":["GET","PUT"],"idempotent":["GET","PUT"],"weight":100}]}`
	tests := []struct {
		name  string
		patch string // JSON merged over base (top-level keys replace)
		want  []string
	}{
		{"valid", `{}`, nil},
		{"farp 2.0", `{"farp":"2.0"}`, []string{"UNSUPPORTED_VERSION"}},
		{"service name", `{"service":{"name":"Assets","instance":"a","version":"1.0.0"}}`, []string{"INVALID_SERVICE"}},
		{"service instance empty", `{"service":{"name":"assets","instance":"","version":"1.0.0"}}`, []string{"INVALID_SERVICE"}},
		{"service version", `{"service":{"name":"assets","instance":"a","version":"1.0"}}`, []string{"INVALID_SERVICE"}},
		{"no health is fine", `{"health":null}`, nil},
		{"health path", `{"health":{"path":"healthz","interval":"5s","unhealthy_after":3}}`, []string{"INVALID_HEALTH"}},
		{"health interval zero", `{"health":{"path":"/h","interval":"0s","unhealthy_after":3}}`, []string{"INVALID_HEALTH"}},
		{"health interval words", `{"health":{"path":"/h","interval":"five","unhealthy_after":3}}`, []string{"INVALID_HEALTH"}},
		{"health interval 1m30s", `{"health":{"path":"/h","interval":"1m30s","unhealthy_after":1}}`, nil},
		{"unhealthy_after zero", `{"health":{"path":"/h","interval":"5s","unhealthy_after":0}}`, []string{"INVALID_HEALTH"}},
		{"unhealthy_after fraction", `{"health":{"path":"/h","interval":"5s","unhealthy_after":1.5}}`, []string{"INVALID_HEALTH"}},
		{"unhealthy_after string", `{"health":{"path":"/h","interval":"5s","unhealthy_after":"3"}}`, []string{"INVALID_HEALTH"}},
		{"route relative", `{"routes":[{"path":"v2","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route empty segment", `{"routes":[{"path":"/v2//x","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route trailing slash", `{"routes":[{"path":"/v2/","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route root", `{"routes":[{"path":"/","methods":["GET"]}]}`, nil},
		{"route malformed param", `{"routes":[{"path":"/v2/{id","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route param with text", `{"routes":[{"path":"/v2/x{id}","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route param digit first", `{"routes":[{"path":"/v2/{1d}","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route duplicate param", `{"routes":[{"path":"/v2/{id}/{id}","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route wildcard not last", `{"routes":[{"path":"/v2/{rest...}/x","methods":["GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route wildcard last", `{"routes":[{"path":"/v2/{rest...}","methods":["GET"]}]}`, nil},
		{"route no methods", `{"routes":[{"path":"/v2","methods":[]}]}`, []string{"INVALID_ROUTE"}},
		{"route lower-case method", `{"routes":[{"path":"/v2","methods":["get"]}]}`, []string{"INVALID_ROUTE"}},
		{"route method twice", `{"routes":[{"path":"/v2","methods":["GET","GET"]}]}`, []string{"INVALID_ROUTE"}},
		{"route idempotent not subset", `{"routes":[{"path":"/v2","methods":["GET"],"idempotent":["PUT"]}]}`, []string{"INVALID_ROUTE"}},
		{"route weight 1001", `{"routes":[{"path":"/v2","methods":["GET"],"weight":1001}]}`, []string{"INVALID_ROUTE"}},
		{"route weight negative", `{"routes":[{"path":"/v2","methods":["GET"],"weight":-1}]}`, []string{"INVALID_ROUTE"}},
		{"route weight fraction", `{"routes":[{"path":"/v2","methods":["GET"],"weight":1.5}]}`, []string{"INVALID_ROUTE"}},
		{"route weight string", `{"routes":[{"path":"/v2","methods":["GET"],"weight":"100"}]}`, []string{"INVALID_ROUTE"}},
		{"route weight 0 and 1000", `{"routes":[{"path":"/a","methods":["GET"],"weight":0},{"path":"/b","methods":["GET"],"weight":1000}]}`, nil},
		{"same key twice", `{"routes":[{"path":"/v2/{id}","methods":["GET"]},{"path":"/v2/{assetId}","methods":["GET","POST"]}]}`, []string{"INVALID_ROUTE"}},
		{"same path other method", `{"routes":[{"path":"/v2/{id}","methods":["GET"]},{"path":"/v2/{id}","methods":["POST"]}]}`, nil},
		{"max_body_bytes", `{"capabilities":{"max_body_bytes":1048576,"streaming":true}}`, nil},
		{"max_body_bytes zero", `{"capabilities":{"max_body_bytes":0}}`, []string{"INVALID_CAPABILITIES"}},
		{"max_body_bytes fraction", `{"capabilities":{"max_body_bytes":1.5}}`, []string{"INVALID_CAPABILITIES"}},
		{"max_body_bytes string", `{"capabilities":{"max_body_bytes":"1MiB"}}`, []string{"INVALID_CAPABILITIES"}},
		{"max_body_bytes over 1 TiB", `{"capabilities":{"max_body_bytes":1099511627777}}`, []string{"INVALID_CAPABILITIES"}},
		{"route schema path", `{"routes":[{"path":"/v2","methods":["GET"],"schema":"/openapi.json#/paths/~1v2"}]}`, nil},
		{"route schema URL", `{"routes":[{"path":"/v2","methods":["GET"],"schema":"https://schemas.example.com/v2.json"}]}`, nil},
		{"route schema relative", `{"routes":[{"path":"/v2","methods":["GET"],"schema":"v2.json"}]}`, []string{"INVALID_ROUTE"}},
		{"route schema scheme", `{"routes":[{"path":"/v2","methods":["GET"],"schema":"file:///etc/passwd"}]}`, []string{"INVALID_ROUTE"}},
		{"route schema space", `{"routes":[{"path":"/v2","methods":["GET"],"schema":"/a b"}]}`, []string{"INVALID_ROUTE"}},
		{"rule order", `{"farp":"0.9","routes":[{"path":"x","methods":[]}]}`, []string{"UNSUPPORTED_VERSION", "INVALID_ROUTE", "INVALID_ROUTE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc map[string]json.RawMessage
			if err := json.Unmarshal([]byte(base), &doc); err != nil {
				t.Fatal(err)
			}
			var patch map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.patch), &patch); err != nil {
				t.Fatal(err)
			}
			for k, v := range patch {
				doc[k] = v
			}
			raw, _ := json.Marshal(doc)
			var m apiv1.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("Unmarshal(%s): %v", raw, err)
			}
			var got []string
			for _, p := range m.Problems() {
				got = append(got, p.Code)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Problems() codes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNumberRoundTrip(t *testing.T) {
	for _, in := range []string{`{"path":"/a","methods":["GET"],"weight":250}`, `{"path":"/a","methods":["GET"],"weight":1.5}`, `{"path":"/a","methods":["GET"]}`} {
		var r apiv1.ManifestRoute
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatalf("Unmarshal(%s): %v", in, err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if string(out) != in {
			t.Errorf("round trip of %s = %s", in, out)
		}
	}
}
