package orchestrator

import (
	"context"
	"errors"
	"testing"
	"time"

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
	// A moment to try: the policy's check runs before the connect, so a refusal comes at
	// once; an allowed address gets as far as the connect, and times out (nothing answers).
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := providerTransport(allow).DialContext(ctx, "tcp", "169.254.169.254:80"); errors.Is(err, endpoint.ErrRefused) {
		t.Errorf("an allowed address was refused: %v", err)
	}
}
