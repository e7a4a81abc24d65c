package discovery_test

import (
	"context"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestRegionsAnswerFromHomeThenTheNextRegionOn: three regions' registries, each read by a
// client of its own; a read goes to home while home is on and ready, else to the next region
// of the priority that is on and ready; each answer names its region, and no region's
// instances appear in another's answer.
func TestRegionsAnswerFromHomeThenTheNextRegionOn(t *testing.T) {
	ctx := context.Background()
	clients := map[string]*discovery.Client{}
	regs := map[string]*registrytest.Server{}
	for _, r := range []string{"a", "b", "c"} {
		regs[r] = registrytest.NewServer(t, registry.Config{Region: r})
		c, _ := newClient(t, regs[r].URL, discovery.Config{})
		clients[r] = c
	}
	register := func(region, id string) {
		req := registrytest.Orders(region+"-"+id, "http://127.0.0.1:9")
		if _, err := regs[region].Registry.Register(ctx, &req); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"b", "c"} {
		register(r, "1")
	}
	off := map[string]bool{}
	rs, err := discovery.NewRegions(discovery.RegionsConfig{Home: "a", Clients: clients, Priority: []string{"c", "b"},
		On: func(r string) bool { return !off[r] }})
	if err != nil {
		t.Fatal(err)
	}
	q := discovery.Query{CapabilityID: "orders.write"}
	read := func() (string, []string) {
		t.Helper()
		for _, c := range clients {
			c.Invalidate()
		}
		res, err := rs.Capabilities(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range res.Entries {
			ids = append(ids, e.InstanceID)
		}
		return res.Region, ids
	}
	steps := []struct {
		name   string
		change func()
		region string
		ids    []string
	}{
		{"home has nothing: the first of the priority", func() {}, "c", []string{"c-1"}},
		{"home has an instance", func() { register("a", "1") }, "a", []string{"a-1"}},
		{"home off", func() { off["a"] = true }, "c", []string{"c-1"}},
		{"home and c off", func() { off["c"] = true }, "b", []string{"b-1"}},
		{"home back", func() { off["a"], off["c"] = false, false }, "a", []string{"a-1"}},
	}
	for _, s := range steps {
		s.change()
		region, ids := read()
		if region != s.region || len(ids) != len(s.ids) || (len(ids) > 0 && ids[0] != s.ids[0]) {
			t.Errorf("%s: region %q, %v; want %q, %v", s.name, region, ids, s.region, s.ids)
		}
	}
	if _, err := discovery.NewRegions(discovery.RegionsConfig{Home: "x", Clients: clients}); err == nil {
		t.Error("a home without a client was taken")
	}
}

func TestReady(t *testing.T) {
	e := func(elig string, panic bool) apiv1.CapabilityEntry {
		return apiv1.CapabilityEntry{Eligibility: elig, Panic: panic}
	}
	for _, tc := range []struct {
		name    string
		entries []apiv1.CapabilityEntry
		want    bool
	}{
		{"empty", nil, false},
		{"serving", []apiv1.CapabilityEntry{e(apiv1.EligibilityServing, false)}, true},
		{"in panic", []apiv1.CapabilityEntry{e(apiv1.EligibilityServing, true), e(apiv1.EligibilityWithdrawn, true)}, false},
		{"none in rotation", []apiv1.CapabilityEntry{e(apiv1.EligibilityWithdrawn, false)}, false},
	} {
		if got := discovery.Ready(tc.entries); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
