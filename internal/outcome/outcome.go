// Package outcome counts what a consumer (a gateway, an orchestrator) saw of each instance
// incarnation it called in one reporting window: requests that were answered, errors,
// connect failures and the latency of the answers, for POST /v1/outcomes.
package outcome

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Tally counts one incarnation's outcomes in the current window; every method is safe for
// concurrent use and lock-free, so the request path pays a few atomic adds.
type Tally struct {
	ok, errors, connectFailures atomic.Int64
	latency                     histogram
}

// Record counts one call: a connect failure (nothing was sent), an error (no answer in
// time, or a 5xx) or an answer, with how long the answer took (ignored for a connect
// failure).
func (t *Tally) Record(connect, failed bool, took time.Duration) {
	switch {
	case connect:
		t.connectFailures.Add(1)
		return
	case failed:
		t.errors.Add(1)
	default:
		t.ok.Add(1)
	}
	t.latency.add(took)
}

// Take returns the window's counts as an outcome of the incarnation (id, generation) and
// starts a new window; ok is false when nothing was counted.
func (t *Tally) Take(id string, generation int64) (apiv1.Outcome, bool) {
	o := apiv1.Outcome{InstanceID: id, Generation: generation,
		OK: int(t.ok.Swap(0)), Errors: int(t.errors.Swap(0)), ConnectFailures: int(t.connectFailures.Swap(0)),
		LatencyMsP99: t.latency.take(0.99)}
	return o, o.OK+o.Errors+o.ConnectFailures > 0
}

// histogram counts latencies in buckets of half an octave (bucket 0 holds everything under
// 96 µs, the last everything from about 3.4 minutes on): a percentile read from it is the
// upper bound of its bucket, at most 50 % above the true value.
type histogram struct{ counts [buckets]atomic.Uint32 }

const (
	buckets = 44
	minExp  = 6 // 2^6 µs: the first bucket's lower bound
)

// bucketOf maps a latency to its bucket.
func bucketOf(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < 1<<minExp {
		return 0
	}
	e := bits.Len64(us) - 1 // 2^e <= us < 2^(e+1)
	half := int(us>>(e-1)) & 1
	return min(2*(e-minExp)+half, buckets-1)
}

// upperMs is the upper bound of bucket b, in milliseconds.
func upperMs(b int) float64 {
	e, half := b/2+minExp, b%2
	lower := float64(uint64(1) << e)
	if half == 1 {
		return 2 * lower / 1000
	}
	return 1.5 * lower / 1000
}

func (h *histogram) add(d time.Duration) { h.counts[bucketOf(d)].Add(1) }

// take returns the q-quantile in milliseconds (0 with nothing counted) and empties h.
func (h *histogram) take(q float64) float64 {
	var counts [buckets]uint32
	var n uint64
	for i := range h.counts {
		counts[i] = h.counts[i].Swap(0)
		n += uint64(counts[i])
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999) // the smallest rank at or above q of n
	var seen uint64
	for i, c := range counts {
		seen += uint64(c)
		if seen >= rank {
			return upperMs(i)
		}
	}
	return upperMs(buckets - 1)
}

// Incarnation names one instance incarnation.
type Incarnation struct {
	ID         string
	Generation int64
}

// Tallies holds a Tally per incarnation, created on first use (for reporters that do not
// know their instances in advance, as an orchestrator's steps do not).
type Tallies struct {
	mu sync.Mutex
	m  map[Incarnation]*Tally
}

// Record counts one call to incarnation k (Tally.Record). The tally is found and counted
// under the lock Take holds, so that no call is counted into a tally Take has dropped.
func (ts *Tallies) Record(k Incarnation, connect, failed bool, took time.Duration) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[k]
	if t == nil {
		if ts.m == nil {
			ts.m = map[Incarnation]*Tally{}
		}
		t = &Tally{}
		ts.m[k] = t
	}
	t.Record(connect, failed, took)
}

// Take returns the window's outcomes of every incarnation and starts a new window;
// incarnations with nothing counted are forgotten.
func (ts *Tallies) Take() []apiv1.Outcome {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []apiv1.Outcome
	for k, t := range ts.m {
		if o, ok := t.Take(k.ID, k.Generation); ok {
			out = append(out, o)
		} else {
			delete(ts.m, k)
		}
	}
	return out
}
