package outcome

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestP99IsTheUpperBoundOfItsBucket(t *testing.T) {
	tests := []struct {
		name      string
		latencies map[time.Duration]int // latency: how many calls
		want      float64               // ms
	}{
		{"nothing", nil, 0},
		{"all fast", map[time.Duration]int{10 * time.Microsecond: 100}, 0.096},
		{"one slow in a hundred is the 99th", map[time.Duration]int{time.Millisecond: 99, 300 * time.Millisecond: 1}, 1.024},
		{"two slow in a hundred are", map[time.Duration]int{time.Millisecond: 98, 300 * time.Millisecond: 2}, 393.216},
		{"5 ms", map[time.Duration]int{5 * time.Millisecond: 10}, 6.144},
		{"past the last bucket", map[time.Duration]int{time.Hour: 1}, upperMs(buckets - 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ta Tally
			for d, n := range tt.latencies {
				for range n {
					ta.Record(false, false, d)
				}
			}
			o, _ := ta.Take("i", 1)
			if o.LatencyMsP99 != tt.want {
				t.Errorf("p99 = %v ms, want %v", o.LatencyMsP99, tt.want)
			}
			if again, _ := ta.Take("i", 1); again.LatencyMsP99 != 0 {
				t.Errorf("a second Take answered p99 %v: the window was not emptied", again.LatencyMsP99)
			}
		})
	}
}

func TestBucketsRiseAndBoundTheirLatencies(t *testing.T) {
	prev := 0
	for us := time.Duration(1); us < 300*time.Second; us = us*11/10 + time.Microsecond {
		b := bucketOf(us)
		if b < prev {
			t.Fatalf("bucket of %v is %d, under the %d of a shorter latency", us, b, prev)
		}
		if b < buckets-1 && float64(us)/float64(time.Millisecond) >= upperMs(b) {
			t.Fatalf("%v falls in bucket %d whose upper bound is %v ms", us, b, upperMs(b))
		}
		prev = b
	}
}

func TestTalliesTakeAWindowAndForgetTheIdle(t *testing.T) {
	var ts Tallies
	a, b := Incarnation{"a", 1}, Incarnation{"b", 2}
	ts.Record(a, false, false, time.Millisecond)
	ts.Record(a, false, true, time.Millisecond)
	ts.Record(b, true, true, time.Millisecond)
	got := ts.Take()
	want := []apiv1.Outcome{
		{InstanceID: "a", Generation: 1, OK: 1, Errors: 1, LatencyMsP99: 1.024},
		{InstanceID: "b", Generation: 2, ConnectFailures: 1},
	}
	sortOutcomes := cmpopts.SortSlices(func(x, y apiv1.Outcome) bool { return x.InstanceID < y.InstanceID })
	if d := cmp.Diff(want, got, sortOutcomes); d != "" {
		t.Errorf("first window (-want +got):\n%s", d)
	}
	if got := ts.Take(); len(got) != 0 {
		t.Errorf("an idle window reported %v", got)
	}
	if len(ts.m) != 0 {
		t.Errorf("idle tallies kept: %d", len(ts.m))
	}
}
