package routing_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/routing"
)

func TestAliases(t *testing.T) {
	man, _ := json.Marshal(map[string]any{"farp": "1.0", "service": map[string]string{"name": "orders", "instance": "o-1", "version": "2.0.0"},
		"routes": []map[string]any{{"path": "/orders/{id}", "methods": []string{"GET"}}}})
	in := routing.Input{
		Policy:    routing.Policy{"orders": {"/orders"}, "old": {"/orders"}},
		Manifests: []routing.ManifestInput{{Generation: 2, Endpoint: "http://o-1", Manifest: man}},
		Aliases: []routing.Alias{
			{Path: "/orders/submit", CapabilityID: "orders.submit", Service: "orders", Version: "2.0.0", Instance: "o-1", Endpoint: "http://o-1", Generation: 2},
			{Path: "/orders/submit", CapabilityID: "orders.submit", Service: "old", Version: "1.0.0", Instance: "old-1", Endpoint: "http://old-1", Generation: 1},
			{Path: "/admin/x", CapabilityID: "orders.submit", Service: "orders", Version: "2.0.0", Instance: "o-1", Endpoint: "http://o-1", Generation: 2},
			{Path: "/orders/../admin", CapabilityID: "orders.submit", Service: "orders", Version: "2.0.0", Instance: "o-1", Endpoint: "http://o-1", Generation: 2},
		},
	}
	tbl := routing.Derive(in)
	m := tbl.Match("POST", "/orders/submit")
	if m.Entry == nil || m.Entry.Service != "orders" || m.Entry.Rewrite != "/v1/capabilities/orders.submit/invoke" || m.Entry.Idempotent {
		t.Fatalf("POST /orders/submit = %+v", m)
	}
	if m := tbl.Match("GET", "/orders/submit"); m.Entry == nil || m.Entry.Pattern != "/orders/{id}" {
		t.Errorf("GET /orders/submit = %+v, want the manifest route", m)
	}
	if m := tbl.Match("POST", "/admin/x"); m.Entry != nil {
		t.Errorf("an alias outside the service's prefixes was routed: %+v", m.Entry)
	}
	c := tbl.Canonical().Conflicts
	if len(c) != 1 || c[0].Winner != "orders@2.0.0" || c[0].Losers[0] != "old@1.0.0" {
		t.Errorf("conflicts = %+v", c)
	}
	// what is dropped is listed, with why (operators read it in GET /v1/gateway/routes)
	var got []string
	for _, r := range tbl.Canonical().RejectedAliases {
		got = append(got, r.Path+" "+r.Code)
		if r.Reason == "" || r.Instance != "o-1" {
			t.Errorf("rejected alias %+v", r)
		}
	}
	if want := []string{"/admin/x PATH_NOT_AUTHORIZED", "/orders/../admin INVALID_ROUTE"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("rejected aliases %v, want %v", got, want)
	}
}

// TestAliasBesideARouteOfItsService: a public alias on the path of one of its own service's
// manifest routes adds POST there; only POST is forwarded to the invoke endpoint.
func TestAliasBesideARouteOfItsService(t *testing.T) {
	man, _ := json.Marshal(map[string]any{"farp": "1.0", "service": map[string]string{"name": "orders", "instance": "o-1", "version": "2.0.0"},
		"routes": []map[string]any{{"path": "/orders/submit", "methods": []string{"GET"}}}})
	tbl := routing.Derive(routing.Input{
		Policy:    routing.Policy{"orders": {"/orders"}},
		Manifests: []routing.ManifestInput{{Generation: 2, Endpoint: "http://o-1", Manifest: man}},
		Aliases:   []routing.Alias{{Path: "/orders/submit", CapabilityID: "orders.submit", Service: "orders", Version: "2.0.0", Instance: "o-1", Endpoint: "http://o-1", Generation: 2}},
	})
	for method, rewrite := range map[string]string{"GET": "", "POST": "/v1/capabilities/orders.submit/invoke"} {
		if m := tbl.Match(method, "/orders/submit"); m.Entry == nil || m.Entry.Rewrite != rewrite || len(m.Entry.Upstreams) != 1 {
			t.Errorf("%s /orders/submit = %+v, want rewrite %q to o-1", method, m.Entry, rewrite)
		}
	}
	if c := tbl.Canonical().Conflicts; len(c) != 0 {
		t.Errorf("conflicts = %+v, want none", c)
	}
}
