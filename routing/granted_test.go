package routing_test

import (
	"testing"

	"github.com/meshflows/meshflows/routing"
)

// TestGranted: the one path-grant rule, which derivation and the registry's RBAC share.
func TestGranted(t *testing.T) {
	tests := []struct {
		path, prefix string
		want         bool
	}{
		{"/v2/assets", "/v2/assets", true},
		{"/v2/assets/{id}", "/v2/assets", true},
		{"/v2/assets/{rest...}", "/v2/assets", true},
		{"/v2/assets/{id}", "/v2/assets/", true},
		{"/v2/assetsx", "/v2/assets", false},
		{"/v2/{kind}/x", "/v2/assets", false},
		{"/v2/{rest...}", "/v2/assets", false},
		{"/v2", "/v2/assets", false},
		{"/admin/users", "/", true},
		{"/{rest...}", "/", true},
		{"/admin/users", "/api/messaging/jms", false},
		{"/api/messaging/jms/publish", "/api/messaging/jms", true},
		{"/api/messaging/jms/publish", "/api/{x}", false},
		{"/api/messaging/jms/publish", "api", false},
		{"/api/messaging/jms/publish", "/api//messaging", false},
	}
	for _, tt := range tests {
		if got := routing.Granted(tt.path, []string{tt.prefix}); got != tt.want {
			t.Errorf("Granted(%q, %q) = %v, want %v", tt.path, tt.prefix, got, tt.want)
		}
	}
	if routing.Granted("/a/b", nil) || !routing.Granted("/a/b", []string{"/x", "/a"}) {
		t.Error("Granted over several prefixes: none grants nothing, any one grants")
	}
}
