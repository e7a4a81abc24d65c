package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestLineChart(t *testing.T) {
	from := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(s int, v float64) apiv1.MetricPoint {
		return apiv1.MetricPoint{Time: from.Add(time.Duration(s) * time.Second), Value: v}
	}
	tests := []struct {
		name      string
		series    []apiv1.MetricSeries
		wantPaths []string
		wantYMax  string
		wantLast  []string
		wantEmpty bool
	}{
		{"one line, scaled to a round top", []apiv1.MetricSeries{{Name: "a", Points: []apiv1.MetricPoint{at(0, 0), at(50, 3.5), at(100, 7)}}},
			// 100 px wide, 28 tall: a plot 20 high from y=4; top 10
			[]string{"M0.0 24.0 L50.0 17.0 L100.0 10.0"}, "10", []string{"7"}, false},
		{"points outside the window left out", []apiv1.MetricSeries{{Name: "a", Points: []apiv1.MetricPoint{at(-10, 99), at(100, 2), at(110, 99)}}},
			[]string{"M100.0 4.0"}, "2", []string{"2"}, false},
		{"two lines on one axis", []apiv1.MetricSeries{{Name: "a", Points: []apiv1.MetricPoint{at(0, 1)}}, {Name: "b", Points: []apiv1.MetricPoint{at(0, 4)}}},
			[]string{"M0.0 20.0", "M0.0 8.0"}, "5", []string{"1", "4"}, false},
		{"nothing in the window", []apiv1.MetricSeries{{Name: "a"}}, []string{""}, "1", []string{"—"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := lineChart(tt.series, from, from.Add(100*time.Second), 100, 28)
			var paths, last []string
			for _, l := range c.Lines {
				paths, last = append(paths, l.Path), append(last, l.Last)
			}
			if diff := cmp.Diff(tt.wantPaths, paths); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLast, last); diff != "" {
				t.Errorf("last values (-want +got):\n%s", diff)
			}
			if c.YMax != tt.wantYMax || c.Empty != tt.wantEmpty {
				t.Errorf("ymax %q empty %v, want %q %v", c.YMax, c.Empty, tt.wantYMax, tt.wantEmpty)
			}
		})
	}
}

func TestNiceCeilAndFormat(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.03: 0.05, 1: 1, 1.2: 2, 3: 5, 7: 10, 10: 10, 11: 20, 480: 500, 60000: 100000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
	for v, want := range map[float64]string{3: "3", 2.5: "2.50", 0.0123: "0.0123", 123.4: "123"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}
