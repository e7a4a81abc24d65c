package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestWatchAcrossARegistryRestart: 'get capabilities --watch' redraws on a change, says so
// when the registry goes away and when it comes back with a new epoch, and goes on watching.
func TestWatchAcrossARegistryRestart(t *testing.T) {
	a := registrytest.NewServer(t, registry.Config{})
	b := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(time.Hour)) // the restarted registry: a new epoch
	var target atomic.Pointer[http.Handler]
	down := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"code":"UNAVAILABLE","message":"restarting"}}`, http.StatusServiceUnavailable)
	}))
	use := func(h http.Handler) { target.Store(&h) }
	use(a.Config.Handler)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*target.Load()).ServeHTTP(w, r) }))
	t.Cleanup(front.Close)
	register := func(s *registrytest.Server, id string) {
		t.Helper()
		req := apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := s.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}
	register(a, "jms-1")
	ctx, cancel := context.WithCancel(context.Background())
	var out watchBuffer
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&out.stdout)
		cmd.SetErr(&out.stderr)
		cmd.SetArgs([]string{"get", "capabilities", "--watch", "--registry", front.URL})
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitOutput(t, &out.stdout, "jms-1")
	register(a, "jms-2") // a change: redrawn
	waitOutput(t, &out.stdout, "jms-2")
	use(down)            // the registry goes away…
	register(a, "jms-3") // …and the long poll held by the old one ends
	waitOutput(t, &out.stderr, "still watching")
	register(b, "jms-9")
	use(b.Config.Handler) // back, restarted: a new epoch
	waitOutput(t, &out.stderr, "the registry restarted")
	waitOutput(t, &out.stdout, "jms-9")
}

// watchBuffer holds a watch's two outputs.
type watchBuffer struct{ stdout, stderr registrytest.SyncBuffer }

// waitOutput waits until b holds want; it asserts no timing, the bound only ends a broken test.
func waitOutput(t *testing.T, b *registrytest.SyncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output never said %q:\n%s", want, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
