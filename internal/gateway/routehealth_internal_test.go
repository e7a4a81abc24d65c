package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/routing"
)

// TestRouteStatSlices: counts land in the slice of their 5 minutes, a slice is reused a day
// later only after it is reset, and the answer leaves out slices older than 24 hours.
func TestRouteStatSlices(t *testing.T) {
	rh, err := newRouteHealth(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &routing.Entry{Route: routing.Route{Method: "GET", Pattern: "/x"}}
	rs := rh.keep([]*routing.Entry{e})["GET /x"]
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rs.record(t0, 200)
	rs.record(t0.Add(time.Minute), 502)
	rs.record(t0.Add(5*time.Minute), 200)
	tests := []struct {
		name      string
		at        time.Time
		wantSlice []int64 // requests per slice shown
		wantAvail float64
	}{
		{"both slices", t0.Add(6 * time.Minute), []int64{2, 1}, 2.0 / 3},
		{"a day later the first is gone", t0.Add(24*time.Hour + time.Minute), []int64{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ans := rh.answer(tt.at)
			var got []int64
			for _, s := range ans.Routes[0].Slices {
				got = append(got, s.Requests)
			}
			if len(got) != len(tt.wantSlice) || got[0] != tt.wantSlice[0] || ans.Routes[0].Availability != tt.wantAvail {
				t.Errorf("slices %v availability %v, want %v %v", got, ans.Routes[0].Availability, tt.wantSlice, tt.wantAvail)
			}
		})
	}
	// the slice of a day later is reset before it counts again
	rs.record(t0.Add(24*time.Hour+time.Minute), 200)
	ans := rh.answer(t0.Add(24*time.Hour + 2*time.Minute))
	if s := ans.Routes[0].Slices; len(s) != 2 || s[1].Requests != 1 || s[1].Failed != 0 { // 10:05 of the day before, and the reused 10:00
		t.Errorf("a reused slice: %+v", s)
	}
}

// BenchmarkRouteStatRecord is what route health adds to each proxied request.
func BenchmarkRouteStatRecord(b *testing.B) {
	rh, _ := newRouteHealth(prometheus.NewRegistry())
	rs := rh.keep([]*routing.Entry{{Route: routing.Route{Method: "GET", Pattern: "/x"}}})["GET /x"]
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rs.record(now, 200)
		}
	})
}
