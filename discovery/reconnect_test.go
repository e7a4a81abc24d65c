package discovery_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/meshflows/meshflows/discovery"
)

// A watch the registry shed over its reconnection cap (429 with a Retry-After) waits the
// Retry-After and up to as much again at random — not the short backoff of a failure — so
// that watchers shed together come back spread over the time the registry asked for.
func TestAShedWatchWaitsTheRetryAfterWithJitter(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full_answers=%v", full), func(t *testing.T) {
			var mu sync.Mutex
			polls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				polls++
				n := polls
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "3")
					w.WriteHeader(http.StatusTooManyRequests)
					fmt.Fprint(w, `{"error":{"code":"RATE_LIMITED","message":"shed"}}`)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"registry_epoch":"e1","revision":1,"complete":true,"reset":true,"capabilities":[],"removed":[]}`)
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var slept []time.Duration
			c, _ := newClient(t, srv.URL, discovery.Config{FullAnswers: full, Rand: func() float64 { return 0.5 },
				Sleep: func(ctx context.Context, d time.Duration) {
					slept = append(slept, d)
				}})
			err := c.Watch(ctx, publish, func(*discovery.Result) { cancel() })
			if err != nil {
				t.Fatal(err)
			}
			if len(slept) != 1 || slept[0] != 4500*time.Millisecond {
				t.Fatalf("waits %v, want [4.5s]: Retry-After 3s and half as much again", slept)
			}
		})
	}
}
