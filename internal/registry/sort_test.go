package registry_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// fullOrder is the answer order of the API reference, compared field by field:
// capability_id, provider, metadata.priority descending, capability_version descending,
// generation ascending.
func fullOrder(a, b registry.Entry) int {
	ca, cb := a.Capability(), b.Capability()
	return cmp.Or(strings.Compare(ca.CapabilityID, cb.CapabilityID), strings.Compare(ca.Provider, cb.Provider),
		apiv1.Rank{Priority: ca.Priority, Version: ca.Version, Generation: a.Record.Generation}.Compare(
			apiv1.Rank{Priority: cb.Priority, Version: cb.Version, Generation: b.Record.Generation}))
}

// TestSortEntriesIsTheFullOrder: SortEntries, which deals a large answer into groups of one
// capability and provider before sorting each, orders any mix of capabilities, providers,
// priorities and versions as a comparison sort by the full order does.
func TestSortEntriesIsTheFullOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name                          string
		entries, ids, providers, vers int
		priorities                    bool
	}{
		{"one capability, one version", 300, 1, 1, 1, false},
		{"one capability, one version, a large answer", 5000, 1, 1, 1, false},
		{"one capability, versions", 300, 1, 1, 4, false},
		{"one capability, priorities", 300, 1, 1, 2, true},
		{"capabilities and providers", 2000, 7, 3, 1, false},
		{"everything mixed", 5000, 12, 4, 5, true},
		{"two entries", 2, 2, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var es []registry.Entry
			for i := range tc.entries {
				var caps []apiv1.Capability
				for c := range 1 + rng.IntN(3) {
					md := ""
					if tc.priorities && rng.IntN(2) == 0 {
						md = fmt.Sprintf(`{"priority": %d}`, rng.IntN(3)-1)
					}
					caps = append(caps, capability(fmt.Sprintf("cap.%d.%d", rng.IntN(tc.ids), c), fmt.Sprintf("p%d", rng.IntN(tc.providers)),
						fmt.Sprintf("1.%d.0", rng.IntN(tc.vers)), md))
				}
				rec := registry.RecordFromInstance(apiv1.Instance{InstanceID: fmt.Sprintf("i-%d", i), ServiceName: "svc", ServiceVersion: "1.0.0",
					Endpoint: "http://127.0.0.1:1", Generation: int64(rng.IntN(1 << 30)), Capabilities: caps}, time.Now())
				for c := range caps {
					es = append(es, registry.Entry{Record: rec, Cap: c})
				}
			}
			es = es[:min(len(es), tc.entries)]
			want := slices.Clone(es)
			slices.SortStableFunc(want, fullOrder)
			registry.SortEntries(es)
			for i := range es {
				if fullOrder(es[i], want[i]) != 0 {
					a, b := es[i].Capability(), want[i].Capability()
					t.Fatalf("entry %d of %d: %s %s %s gen %d, want %s %s %s gen %d", i, len(es),
						a.CapabilityID, a.Provider, a.CapabilityVersion, es[i].Record.Generation, b.CapabilityID, b.Provider, b.CapabilityVersion, want[i].Record.Generation)
				}
			}
		})
	}
}

// TestSortEntriesOfSharedLists: the replicas of a service share their parsed capability
// list, which SortEntries finds runs by; an unfiltered answer of such a fleet is in the full
// order, and still is once SortEntries remembers fewer capability addresses than there are.
func TestSortEntriesOfSharedLists(t *testing.T) {
	f := newFixture(t, registry.Config{})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		svc := i % 20
		md := ""
		if svc%3 == 0 {
			md = fmt.Sprintf(`{"priority": %d}`, svc%2)
		}
		id := fmt.Sprintf("i-%d", rng.IntN(1<<30)) // registered in no order of their ids
		mustRegister(t, f, request(id, fmt.Sprintf("svc-%d", svc),
			capability("orders.read", fmt.Sprintf("p%d", svc%3), fmt.Sprintf("1.%d.0", svc%4), md),
			capability(fmt.Sprintf("orders.s%d", svc%7), "http", "2.0.0", ""),
			capability("audit.write", "kafka", fmt.Sprintf("1.%d.0+build.%d", svc%2, svc), "")))
	}
	for _, limit := range []int{1 << 16, 5} {
		t.Run(fmt.Sprintf("remembering %d", limit), func(t *testing.T) {
			registry.LimitRunAddresses(t, limit)
			got := f.reg.Query(&registry.Query{IncludeAll: true}).Entries
			if len(got) != 9000 {
				t.Fatalf("%d entries, want 9000", len(got))
			}
			want := slices.Clone(got)
			rng.Shuffle(len(want), func(i, j int) { want[i], want[j] = want[j], want[i] })
			slices.SortStableFunc(want, fullOrder)
			for i := range got {
				if got[i] != want[i] {
					a, b := got[i].Capability(), want[i].Capability()
					t.Fatalf("entry %d: %s %s %s gen %d, want %s %s %s gen %d", i, a.CapabilityID, a.Provider, a.CapabilityVersion,
						got[i].Record.Generation, b.CapabilityID, b.Provider, b.CapabilityVersion, want[i].Record.Generation)
				}
			}
		})
	}
}
