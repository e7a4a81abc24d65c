package orchestrator

import (
	"context"
	"errors"
	"testing"

	"github.com/meshflows/meshflows/internal/endpoint"
)

// TestProviderTransportRefusesMetadata: the provider client's dialer refuses a link-local
// address whatever name resolved to it, at once, and connects where the policy allows.
func TestProviderTransportRefusesMetadata(t *testing.T) {
	_, err := providerTransport(endpoint.Policy{}).DialContext(context.Background(), "tcp", "169.254.169.254:80")
	if !errors.Is(err, endpoint.ErrRefused) {
		t.Errorf("dial 169.254.169.254:80 = %v, want ErrRefused", err)
	}
	allow, err := endpoint.ParseAllow([]string{"169.254.169.254"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // connecting is not wanted, only not being refused by the policy
	if _, err := providerTransport(allow).DialContext(ctx, "tcp", "169.254.169.254:80"); errors.Is(err, endpoint.ErrRefused) {
		t.Errorf("an allowed address was refused: %v", err)
	}
}
