package nameserver

import (
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
)

// fleetEntries is a whole fleet's view as the DNS server watches it: instances in services of
// 100, two capability entries each.
func fleetEntries(instances int) []apiv1.CapabilityEntry {
	out := make([]apiv1.CapabilityEntry, 0, 2*instances)
	for i := range instances {
		svc := fmt.Sprintf("svc-%d", i/100)
		for _, c := range []string{"orders.read", svc + ".call"} {
			out = append(out, apiv1.CapabilityEntry{InstanceID: fmt.Sprintf("i-%d", i), ServiceName: svc, CapabilityID: c, Provider: "p",
				CapabilityVersion: "1.0.0", Endpoint: fmt.Sprintf("http://10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255),
				Eligibility: apiv1.EligibilityServing, Weight: 100, Generation: 1})
		}
	}
	return out
}

// BenchmarkIndex: one instance deregistered and replaced, applied to the index of a
// 60,000-instance fleet (what the server pays per change), against building the index from
// the whole view (what it paid per revision when it rebuilt the index from the view).
func BenchmarkIndex(b *testing.B) {
	const n = 60_000
	entries := fleetEntries(n)
	b.Run("one change", func(b *testing.B) {
		ix := newIndex("meshflows.")
		ix.apply(&discovery.Delta{Complete: true, Reset: true, Entries: entries})
		gen := int64(1)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := (i * 7919) % n
			gen++
			put := []apiv1.CapabilityEntry{entries[2*k], entries[2*k+1]}
			put[0].Generation, put[1].Generation = gen, gen
			put[0].Weight, put[1].Weight = 10, 10
			ix.apply(&discovery.Delta{Complete: true, Revision: gen, Gone: []apiv1.Removal{{InstanceID: put[0].InstanceID, Generation: gen - 1}}, Put: put})
		}
	})
	b.Run("whole view", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ix := newIndex("meshflows.")
			ix.apply(&discovery.Delta{Complete: true, Reset: true, Entries: entries})
		}
	})
}
