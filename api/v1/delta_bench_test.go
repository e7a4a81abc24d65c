package apiv1_test

import (
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// BenchmarkDeltaApply: one delta (an instance gone, one added) applied to a watcher's copy of
// the whole fleet's answer (what a DNS server's discovery view holds): 120,000 entries at
// 60,000 instances of 600 services.
func BenchmarkDeltaApply(b *testing.B) {
	for _, n := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			held := make([]apiv1.CapabilityEntry, 0, 2*n)
			for i := range n {
				for _, c := range []string{"orders.read", "orders.http"} {
					held = append(held, apiv1.CapabilityEntry{CapabilityID: c, Provider: "db", CapabilityVersion: "1.0.0",
						InstanceID: fmt.Sprintf("svc-%03d-%05d", i%600, i), ServiceName: fmt.Sprintf("svc-%03d", i%600), Generation: int64(i + 1)})
				}
			}
			apiv1.SortCapabilityEntries(held)
			d := &apiv1.DiscoveryDelta{Removed: []apiv1.Removal{{InstanceID: held[7].InstanceID, Generation: held[7].Generation}},
				Added: []apiv1.CapabilityEntry{{CapabilityID: "orders.read", Provider: "db", CapabilityVersion: "1.0.0", InstanceID: "new", Generation: int64(n + 1)}}}
			b.ReportAllocs()
			for b.Loop() {
				d.Apply(held)
			}
		})
	}
}
