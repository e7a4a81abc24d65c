package registry_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// The reconnection cap: a burst is admitted, the excess is answered 429 with a Retry-After
// that grows with the backlog (the time the bucket needs to serve those shed before), the
// bucket refills at its rate, and heartbeats are never shed.
func TestReconnectionCapShedsRegistrationsNotHeartbeats(t *testing.T) {
	f := newFixture(t, registry.Config{ReconnectRate: 2, ReconnectBurst: 3})
	ctx := t.Context()
	var gens []int64
	for i := range 3 {
		resp, err := f.reg.Register(ctx, request(fmt.Sprintf("a-%d", i), "svc"))
		if err != nil {
			t.Fatalf("registration %d of the burst: %v", i, err)
		}
		gens = append(gens, resp.Generation)
	}
	var waits []int
	for i := range 10 { // a herd arrives at once: each is told a later time than the one before
		_, err := f.reg.Register(ctx, request(fmt.Sprintf("b-%d", i), "svc"))
		var ae *apiv1.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.Code != apiv1.CodeRateLimited {
			t.Fatalf("registration %d past the burst: %v, want 429 RATE_LIMITED", i, err)
		}
		waits = append(waits, ae.RetryAfter)
	}
	// backlogs 1..10 at 2 a second: ceil(n / 2) seconds, at least 1
	want := []int{1, 1, 2, 2, 3, 3, 4, 4, 5, 5}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("Retry-After %v, want %v: spread over the backlog", waits, want)
		}
	}
	for i := range 3 {
		if _, err := f.reg.Heartbeat(ctx, fmt.Sprintf("a-%d", i), &apiv1.HeartbeatRequest{Generation: gens[i], Health: "ok"}); err != nil {
			t.Errorf("a heartbeat was shed: %v", err)
		}
	}
	f.clock.Advance(time.Second) // two more tokens
	for i := range 2 {
		if _, err := f.reg.Register(ctx, request(fmt.Sprintf("b-%d", i), "svc")); err != nil {
			t.Errorf("after a second, registration %d: %v", i, err)
		}
	}
	if _, err := f.reg.Register(ctx, request("b-2", "svc")); err == nil {
		t.Error("a third within the second was admitted at 2 a second")
	}
	f.clock.Advance(3 * time.Second) // the shed ones are forgotten: the backlog is small again
	if _, err := f.reg.Register(ctx, request("b-3", "svc")); err != nil {
		t.Errorf("after the backlog: %v", err)
	}
}
