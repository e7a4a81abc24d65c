package registry_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// TestSummaryIsWhatTheCatalogSays holds Summary to what a reader of the whole catalog
// (Catalog) counts and lists with the same filters: the counts, the values a filter can
// take, and the first instances in the catalog's order, whatever order they registered in.
func TestSummaryIsWhatTheCatalogSays(t *testing.T) {
	f := newFixture(t, registry.Config{LeaseTTL: 90 * time.Second})
	ids := make([]int, 90)
	for i := range ids {
		ids[i] = i
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	// Registered in three waves 20 s apart: at the end, leases have 30 s, 50 s and 70 s left.
	for wave := range 3 {
		for _, i := range ids[wave*30 : (wave+1)*30] {
			caps := []apiv1.Capability{capability(fmt.Sprintf("orders.v%d", i%4), fmt.Sprintf("p%d", i%3), "1.0.0", "")}
			if i%5 == 0 {
				caps = append(caps, capability("audit.write", "p9", "1.0.0", ""))
			}
			mustRegister(t, f, request(fmt.Sprintf("i-%02d", i), fmt.Sprintf("svc-%d", i%7), caps...))
		}
		f.clock.Advance(20 * time.Second)
	}
	f.clock.Advance(time.Second) // 19 s, 49 s and 69 s left
	all := f.reg.Catalog()
	for _, tc := range []struct {
		name string
		q    registry.SummaryQuery
	}{
		{"everything", registry.SummaryQuery{ExpiringWithin: 30 * time.Second, Limit: 100}},
		{"the first ten", registry.SummaryQuery{ExpiringWithin: 30 * time.Second, Limit: 10}},
		{"none listed", registry.SummaryQuery{ExpiringWithin: time.Minute}},
		{"a lease ending just at expiring_within is not expiring soon", registry.SummaryQuery{ExpiringWithin: 49 * time.Second}},
		{"a service", registry.SummaryQuery{ServiceName: "svc-3", Limit: 5}},
		{"a capability", registry.SummaryQuery{CapabilityID: "orders.v2", ExpiringWithin: time.Minute, Limit: 7}},
		{"a provider", registry.SummaryQuery{Provider: "p9", Limit: 3}},
		{"capability and provider on one capability", registry.SummaryQuery{CapabilityID: "audit.write", Provider: "p1", Limit: 50}},
		{"all three", registry.SummaryQuery{ServiceName: "svc-0", CapabilityID: "orders.v1", Provider: "p1", Limit: 50}},
		{"nothing matches", registry.SummaryQuery{ServiceName: "svc-404", Limit: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := f.reg.Summary(tc.q)
			if diff := cmp.Diff(fromCatalog(all, tc.q, f.clock.Now()), got); diff != "" {
				t.Errorf("Summary(%+v) (-from the catalog +got):\n%s", tc.q, diff)
			}
		})
	}
	// Past every lease, before a sweep: all expired.
	f.clock.Advance(2 * time.Minute)
	if got := f.reg.Summary(registry.SummaryQuery{}); got.Expired != 90 || got.ExpiringSoon != 0 || len(got.Instances) != 0 {
		t.Errorf("past every lease: %d expired, %d expiring soon, %d listed; want 90, 0, 0", got.Expired, got.ExpiringSoon, len(got.Instances))
	}
}

// fromCatalog is what a reader of the whole catalog makes of it.
func fromCatalog(cat apiv1.CatalogResponse, q registry.SummaryQuery, now time.Time) apiv1.CatalogSummary {
	out := apiv1.CatalogSummary{RegistryEpoch: cat.RegistryEpoch, Revision: cat.Revision, Total: len(cat.Instances), Instances: []apiv1.Instance{}}
	for _, in := range cat.Instances {
		for _, c := range in.Capabilities {
			if !slices.Contains(out.Providers, c.Provider) {
				out.Providers = append(out.Providers, c.Provider)
			}
			if !slices.Contains(out.CapabilityIDs, c.CapabilityID) {
				out.CapabilityIDs = append(out.CapabilityIDs, c.CapabilityID)
			}
		}
		if q.ServiceName != "" && in.ServiceName != q.ServiceName ||
			!slices.ContainsFunc(in.Capabilities, func(c apiv1.Capability) bool {
				return (q.CapabilityID == "" || c.CapabilityID == q.CapabilityID) && (q.Provider == "" || c.Provider == q.Provider)
			}) {
			continue
		}
		out.Matching++
		switch left := in.LeaseExpiresAt.Sub(now); {
		case left <= 0:
			out.Expired++
		case left < q.ExpiringWithin:
			out.ExpiringSoon++
		}
		if len(out.Instances) < q.Limit {
			out.Instances = append(out.Instances, in)
		}
	}
	slices.Sort(out.Providers)
	slices.Sort(out.CapabilityIDs)
	return out
}
