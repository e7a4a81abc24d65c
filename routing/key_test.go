package routing_test

import (
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

func TestKey(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/", "/"},
		{"/v2/assets", "/v2/assets"},
		{"/v2/assets/{id}", "/v2/assets/{}"},
		{"/v2/assets/{assetId}", "/v2/assets/{}"},
		{"/v2/{kind}/{rest...}", "/v2/{}/{...}"},
	}
	for _, tt := range tests {
		segs, err := apiv1.ParsePath(tt.path)
		if err != nil {
			t.Fatalf("ParsePath(%q): %v", tt.path, err)
		}
		if got := routing.Key(segs); got != tt.want {
			t.Errorf("Key(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}
