package routing

import "testing"

// BenchmarkDeriveFreshScratch is BenchmarkDerive/services=10000/decoded with a new scratch
// each time: the first derivation of a process, before the pool holds one.
func BenchmarkDeriveFreshScratch(b *testing.B) {
	in := DecodedFleet(b, BenchFleet(10000))
	b.ReportAllocs()
	for b.Loop() {
		derive(in, new(scratch), 0)
	}
}
