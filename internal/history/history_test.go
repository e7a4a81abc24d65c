package history_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/internal/history"
)

func TestSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"k"})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Buckets: []float64{0.001, 0.01, 0.1}})
	zones := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "z"}, []string{"zone"})
	reg.MustRegister(gauge, counter, hist, zones)
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	h, err := history.New(history.Config{Gatherer: reg, Interval: 10 * time.Second, Window: 30 * time.Second, Now: func() time.Time { return now },
		Series: []history.Series{
			{Name: "gauge", Family: "g", Kind: history.Gauge},
			{Name: "rate", Family: "c_total", Kind: history.Rate},
			{Name: "increase", Family: "c_total", Kind: history.Increase},
			{Name: "p99", Family: "h_seconds", Kind: history.P99, Scale: 1000},
			{Name: "zones", Family: "z", Kind: history.Count},
			{Name: "absent", Family: "nothing", Kind: history.Gauge},
		}})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		gauge      float64
		a, b       float64 // counter increments of two series
		obs        []float64
		zones      int
		wantValues map[string]float64
		wantLen    map[string]int
	}
	steps := []step{
		{gauge: 3, a: 5, zones: 0, wantValues: map[string]float64{"gauge": 3, "zones": 0, "absent": 0}, wantLen: map[string]int{"rate": 0, "p99": 0}},
		{gauge: 4, a: 50, b: 50, obs: repeat(0.005, 100), zones: 2,
			// 100 observations in (1 ms, 10 ms]: the 99th is 99 % of the way through that bucket
			wantValues: map[string]float64{"gauge": 4, "rate": 10, "increase": 100, "p99": 1 + 9*0.99, "zones": 2}},
		{gauge: 5, a: 0, obs: repeat(0.5, 10), zones: 1,
			// nothing counted; every observation past the last bound: the last bound
			wantValues: map[string]float64{"gauge": 5, "rate": 0, "increase": 0, "p99": 100, "zones": 1}},
		{gauge: 6, wantValues: map[string]float64{"gauge": 6}, wantLen: map[string]int{"gauge": 4, "p99": 2}},  // nothing observed: no p99 point
		{gauge: 7, wantValues: map[string]float64{"gauge": 7}, wantLen: map[string]int{"gauge": 4, "rate": 4}}, // the oldest aged out (30 s window)
	}
	for i, st := range steps {
		gauge.Set(st.gauge)
		counter.WithLabelValues("a").Add(st.a)
		counter.WithLabelValues("b").Add(st.b)
		for _, o := range st.obs {
			hist.Observe(o)
		}
		zones.Reset()
		for z := range st.zones {
			zones.WithLabelValues(string(rune('a' + z))).Set(0.5)
		}
		if err := h.Sample(); err != nil {
			t.Fatal(err)
		}
		snap := h.Snapshot()
		got, lens := map[string]float64{}, map[string]int{}
		for _, s := range snap.Series {
			lens[s.Name] = len(s.Points)
			if n := len(s.Points); n > 0 && s.Points[n-1].Time.Equal(now) {
				got[s.Name] = math.Round(s.Points[n-1].Value*1e6) / 1e6
			}
		}
		for k, want := range st.wantValues {
			if math.Abs(got[k]-want) > 1e-6 {
				t.Errorf("step %d: %s = %v, want %v", i, k, got[k], want)
			}
		}
		for k, want := range st.wantLen {
			if lens[k] != want {
				t.Errorf("step %d: %s has %d points, want %d", i, k, lens[k], want)
			}
		}
		if diff := cmp.Diff(10, snap.IntervalSeconds); diff != "" {
			t.Error(diff)
		}
		now = now.Add(10 * time.Second)
	}
}

func TestConfigRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, cfg := range []history.Config{
		{},
		{Gatherer: reg, Interval: time.Millisecond},
		{Gatherer: reg, Interval: time.Minute, Window: time.Second},
		{Gatherer: reg, Series: []history.Series{{Name: "x"}}},
	} {
		if _, err := history.New(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
