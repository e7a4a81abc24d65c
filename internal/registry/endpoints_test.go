package registry_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/endpoint"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// TestEndpointPolicy: a link-local endpoint is refused by default, taken inside an allowed
// range; a registry that starts on a store holding registrations its policy refuses serves
// them and reports each at start.
func TestEndpointPolicy(t *testing.T) {
	clock := registrytest.NewClock(registrytest.Epoch0)
	store := memstore.New(clock.Now)
	allow, err := endpoint.ParseAllow([]string{"169.254.10.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	permissive, err := registry.New(store, registry.Config{Now: clock.Now, Endpoints: allow})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		endpoint string
		refused  bool
	}{
		{"http://169.254.10.7:8080", false},
		{"http://169.254.169.254/latest", true},
		{"http://127.0.0.1:8080/prefix", false},
	} {
		req := registrytest.Orders("o-"+strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(tt.endpoint[7:]), tt.endpoint)
		_, err := permissive.Register(ctx, &req)
		if (err != nil) != tt.refused {
			t.Errorf("register %s: %v, want refused: %v", tt.endpoint, err, tt.refused)
		}
		if ae, ok := err.(*apiv1.Error); tt.refused && (!ok || ae.Status != 400 || len(ae.Details) != 1 || ae.Details[0].Path != "endpoint") {
			t.Errorf("register %s: %#v, want a 400 naming the endpoint", tt.endpoint, err)
		}
	}

	// The same store under the default policy: the held link-local registration is reported.
	var logs registrytest.SyncBuffer
	prom := prometheus.NewRegistry()
	strict, err := registry.New(store, registry.Config{Now: clock.Now, SweepInterval: time.Millisecond, Registerer: prom,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- strict.Run(rctx) }()
	registrytest.Until(t, "the held registration reported", func() bool {
		return gaugeValue(t, prom, "meshflows_registry_refusable_endpoints") == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "instance_id=o-169-254-10-7-8080") || !strings.Contains(out, "link-local") {
		t.Errorf("the log names neither the instance nor the problem:\n%s", out)
	}
	if _, ok := strict.Store().Get("o-169-254-10-7-8080"); !ok {
		t.Error("the held registration was dropped; it is reported and served")
	}
}

// gaugeValue is the value of the gauge name in prom, or -1 when it has none.
func gaugeValue(t *testing.T, prom *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
