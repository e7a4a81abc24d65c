package gateway

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/routing"
)

// view is a routes view of n services of two instances, each with one route.
func view(epoch string, n, generation int) *discovery.RoutesResult {
	r := &discovery.RoutesResult{Meta: discovery.Meta{Source: discovery.SourceFresh, RegistryEpoch: epoch, Complete: true}}
	for s := range n {
		svc := fmt.Sprintf("svc-%d", s)
		for i := range 2 {
			inst := fmt.Sprintf("%s-%d", svc, i)
			r.Manifests = append(r.Manifests, apiv1.ManifestEntry{InstanceID: inst, ServiceName: svc, ServiceVersion: "1.0.0", Endpoint: "http://" + inst + ":80",
				Generation: int64(generation + 2*s + i), Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Version: "1.0.0", Instance: inst},
					Routes: []apiv1.ManifestRoute{{Path: "/" + svc + "/items", Methods: []string{"GET"}}}}})
		}
	}
	return r
}

func newIncrementalGateway(t *testing.T, every int, logs *strings.Builder) (*Gateway, *prometheus.Registry) {
	t.Helper()
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	policy := routing.Policy{}
	for s := range 20 {
		policy[fmt.Sprintf("svc-%d", s)] = []string{fmt.Sprintf("/svc-%d", s)}
	}
	g, err := New(Config{Discovery: disc, Policy: func() routing.Policy { return policy }, RoutesVerifyEvery: every, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

func canonical(t *testing.T, tb *routing.Table) string {
	b, err := json.Marshal(tb.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTheGatewayAppliesViewsIncrementally: after the first view, a view that withdraws an
// instance and adds a service changes the table by those rows only (logged), and is the
// table a full derivation gives; a view of a new registry epoch is derived whole.
func TestTheGatewayAppliesViewsIncrementally(t *testing.T) {
	var logs strings.Builder
	g, _ := newIncrementalGateway(t, -1, &logs)
	g.routes.Store(view("e1", 3, 1))
	g.derive()
	first := g.tables.Deriver()
	next := view("e1", 4, 1)
	next.Manifests = next.Manifests[1:] // svc-0-0 withdrawn, svc-3 new
	g.routes.Store(next)
	g.derive()
	if g.tables.Deriver() != first {
		t.Fatal("a continuation of the view was derived whole")
	}
	want := routing.Derive(g.input(next, g.cfg.Policy()))
	if got := canonical(t, g.state.Load().table); got != canonical(t, want) {
		t.Fatalf("incremental table %s, full %s", got, canonical(t, want))
	}
	if !strings.Contains(logs.String(), "rows_changed=2") || !strings.Contains(logs.String(), "GET /svc-3/items (added)") {
		t.Errorf("the log does not say which rows changed:\n%s", logs.String())
	}
	g.routes.Store(view("e2", 2, 100))
	g.derive()
	if g.tables.Deriver() == first {
		t.Error("a view of a new registry epoch was applied as a continuation")
	}
}

// TestTheShadowCheckCatchesACorruptedDerivation: with the deriver's state corrupted behind
// the gateway's back, the next full derivation (every change here) finds the difference: the
// full table serves, the divergence is counted and logged with the first differing row, and
// later changes apply to a deriver started again from the full table.
func TestTheShadowCheckCatchesACorruptedDerivation(t *testing.T) {
	var logs strings.Builder
	g, reg := newIncrementalGateway(t, 1, &logs)
	g.routes.Store(view("e1", 3, 1))
	g.derive()
	// corrupt: the deriver loses svc-1's instances, the gateway's record of its input does not
	g.tables.Deriver().Apply(routing.Change{DeleteManifest: "svc-1-0"}, routing.Change{DeleteManifest: "svc-1-1"})
	next := view("e1", 3, 1)
	next.Manifests = next.Manifests[1:] // a real change: svc-0-0 withdrawn
	g.routes.Store(next)
	g.derive()
	want := canonical(t, routing.Derive(g.input(next, g.cfg.Policy())))
	if got := canonical(t, g.state.Load().table); got != want {
		t.Fatalf("served %s, want the full table %s", got, want)
	}
	if n := testutil.ToFloat64(g.metrics.divergence); n != 1 {
		t.Errorf("divergence counted %v times, want 1", n)
	}
	if c, err := testutil.GatherAndCount(reg, "meshflows_gateway_routes_divergence_total"); err != nil || c != 1 {
		t.Errorf("meshflows_gateway_routes_divergence_total: %d series (%v)", c, err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "first_difference") || !strings.Contains(logs.String(), "/svc-1/items") {
		t.Errorf("the log does not name the difference:\n%s", logs.String())
	}
	again := view("e1", 3, 1)
	again.Manifests = again.Manifests[2:] // svc-0-1 withdrawn too
	g.routes.Store(again)
	g.derive()
	if got := canonical(t, g.state.Load().table); got != canonical(t, routing.Derive(g.input(again, g.cfg.Policy()))) {
		t.Errorf("after the restart of the deriver: %s", got)
	}
	if n := testutil.ToFloat64(g.metrics.divergence); n != 1 {
		t.Errorf("divergence counted %v times after a clean change, want still 1", n)
	}
}

// BenchmarkDeriveOneChange is the gateway's work for one routes view that differs from the
// last by one instance (withdrawn, then back), at 10,000 services of two instances: the view
// compared, the change applied, the new table's upstreams picked.
func BenchmarkDeriveOneChange(b *testing.B) {
	disc, err := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	policy := routing.Policy{}
	for s := range n {
		policy[fmt.Sprintf("svc-%d", s)] = []string{fmt.Sprintf("/svc-%d", s)}
	}
	g, err := New(Config{Discovery: disc, Policy: func() routing.Policy { return policy }, RoutesVerifyEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	full, less := view("e1", n, 1), view("e1", n, 1)
	less.Manifests = less.Manifests[1:]
	g.routes.Store(full)
	g.derive()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			g.routes.Store(less)
		} else {
			g.routes.Store(full)
		}
		g.derive()
		i++
	}
}
