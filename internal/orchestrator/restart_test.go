package orchestrator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/examples/providers/rabbitmq"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestAProviderThatDiedWhileTheRegistryWasDown: the registry is restarted empty while a
// provider is gone for good. Through the warm-up the orchestrator's view keeps what it knew
// (the others may not have re-registered yet), the dead one included, and no answer of the
// restarted registry can remove it. The step that meets its refused connection still
// succeeds on the next candidate, and the view drops the dead instance then, instead of
// sending every later step to it first until the warm-up ends.
func TestAProviderThatDiedWhileTheRegistryWasDown(t *testing.T) {
	before := registrytest.NewServer(t, registry.Config{})
	before.Clock.Advance(registry.DefaultLeaseTTL)
	var front atomic.Pointer[http.Handler]
	front.Store(&before.Config.Handler)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*front.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)

	live, _ := serveProvider(t, func(ep string) (*messaging.Provider, error) { return jms.New(ep, "") })
	mirror, _ := serveProvider(t, func(ep string) (*messaging.Provider, error) { return rabbitmq.New(ep, "") })
	doomed, doomedSrv := serveProvider(t, func(ep string) (*messaging.Provider, error) { return jms.New(ep, "") })
	register := func(reg *registry.Registry, p *messaging.Provider, priority int) string {
		t.Helper()
		req := p.Registration()
		for i := range req.Capabilities {
			req.Capabilities[i].Metadata = json.RawMessage(`{"priority":` + strconv.Itoa(priority) + `}`)
		}
		if _, err := reg.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		return req.InstanceID
	}
	register(before.Registry, live, 1)
	register(before.Registry, mirror, 1)
	dead := register(before.Registry, doomed, 9) // the first candidate

	disc, _ := discovery.New(discovery.Config{Registries: []string{srv.URL}, RequestTimeout: time.Second})
	o, err := orchestrator.New(orchestrator.Config{Discovery: disc, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-publish")
	run := func(when string) {
		t.Helper()
		r, err := o.RunNow(context.Background(), "order-publish", "test", json.RawMessage(`{"order":1}`))
		if err != nil || r.Status != "succeeded" {
			t.Fatalf("%s: %v %+v", when, err, r)
		}
	}
	run("before the restart")
	if n := len(doomed.Messages("orders.events")); n != 1 {
		t.Fatalf("the first candidate took %d messages before the restart, want 1", n)
	}

	// The registry goes down and comes back empty; meanwhile the doomed provider stops for
	// good, and the others register again.
	doomedSrv.Close()
	after := registrytest.NewServerAt(t, registry.Config{}, registrytest.Epoch0.Add(time.Hour))
	register(after.Registry, live, 1)
	register(after.Registry, mirror, 1)
	front.Store(&after.Config.Handler)
	disc.Invalidate()
	held := func() []string {
		t.Helper()
		res, err := disc.Cached(discovery.Query{CapabilityID: "messaging.publish", Provider: "jms", Version: ">=1.0 <2.0", IncludeAll: true})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range res.Entries {
			ids = append(ids, e.InstanceID)
		}
		return ids
	}
	run("after the restart") // the dead one refuses; the live one takes it
	if n := len(live.Messages("orders.events")); n != 1 {
		t.Errorf("the live provider took %d messages after the restart, want 1", n)
	}
	if ids := held(); slices.Contains(ids, dead) || len(ids) != 1 {
		t.Errorf("after its connection was refused the view holds %v, want the live instance alone (not %s)", ids, dead)
	}
}
