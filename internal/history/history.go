package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Kind says how a series is read from its metric family.
type Kind int

const (
	// Gauge is the sum of the family's gauge values.
	Gauge Kind = iota
	// Rate is the per-second increase of the sum of the family's counters since the sample
	// before.
	Rate
	// Increase is the increase of the sum of the family's counters since the sample before.
	Increase
	// P99 is the 99th percentile of the observations of the family's histograms since the
	// sample before (interpolated within a bucket; none when nothing was observed).
	P99
	// Count is the number of the family's series (a family that has one per thing in a
	// state, as zone outliers).
	Count
)

// Series is one series to keep.
type Series struct {
	Name, Help, Unit string
	// Family is the Prometheus metric family it is read from.
	Family string
	Kind   Kind
	// Scale multiplies the value (1000: seconds to milliseconds); 0 is 1.
	Scale float64
}

// RegistrySeries are the registry's key series: what an on-call engineer looks at first.
var RegistrySeries = []Series{
	{Name: "active_instances", Help: "Instances with a live registration.", Unit: "instances", Family: "meshflows_registry_active_instances", Kind: Gauge},
	{Name: "heartbeats_per_second", Help: "Heartbeats accepted a second.", Unit: "/s", Family: "meshflows_registry_heartbeat_success_total", Kind: Rate},
	{Name: "evictions", Help: "Instances evicted because their lease expired, per sample.", Unit: "instances", Family: "meshflows_registry_stale_evictions_total", Kind: Increase},
	{Name: "discovery_p99_ms", Help: "99th percentile of the time to answer a discovery request, per sample.", Unit: "ms", Family: "meshflows_registry_discovery_duration_seconds", Kind: P99, Scale: 1000},
	{Name: "outliers", Help: "Instances ejected as relative outliers.", Unit: "instances", Family: "meshflows_outlier_instances", Kind: Gauge},
	{Name: "zone_outliers", Help: "Zones of a capability failing as a whole against its other zones.", Unit: "zones", Family: "meshflows_zone_outlier_error_share", Kind: Count},
	{Name: "watchers", Help: "Discovery requests waiting in a long poll.", Unit: "requests", Family: "meshflows_registry_watchers", Kind: Gauge},
}

// Defaults.
const (
	DefaultInterval = 10 * time.Second
	DefaultWindow   = time.Hour
)

// Config configures a History.
type Config struct {
	Gatherer prometheus.Gatherer
	// Series are the series to keep (default RegistrySeries).
	Series []Series
	// Interval is the time between samples (default DefaultInterval), Window how far back
	// they are kept (default DefaultWindow).
	Interval, Window time.Duration
	Now              func() time.Time
}

// Validate reports what is wrong with c, defaults applied.
func (c *Config) Validate() error {
	switch {
	case c.Gatherer == nil:
		return errors.New("history: no gatherer")
	case c.Interval < time.Second:
		return fmt.Errorf("history: interval %s: want at least 1s", c.Interval)
	case c.Window < c.Interval:
		return fmt.Errorf("history: window %s is shorter than the interval %s", c.Window, c.Interval)
	}
	for i, s := range c.Series {
		if s.Name == "" || s.Family == "" {
			return fmt.Errorf("history: series %d needs a name and a family", i)
		}
	}
	return nil
}

// History samples its series on an interval and keeps the last window of them.
type History struct {
	cfg Config

	mu     sync.Mutex
	points [][]apiv1.MetricPoint // by series, oldest first
	prev   []reading             // the last sample's raw readings, by series
}

// reading is a family's raw state at one sample: a counter sum, or a histogram's
// cumulative bucket counts.
type reading struct {
	at      time.Time
	ok      bool
	sum     float64
	bounds  []float64
	buckets []float64
	count   float64
}

// New returns a History.
func New(cfg Config) (*History, error) {
	if cfg.Series == nil {
		cfg.Series = RegistrySeries
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &History{cfg: cfg, points: make([][]apiv1.MetricPoint, len(cfg.Series)), prev: make([]reading, len(cfg.Series))}, nil
}

// Run samples every interval until ctx ends.
func (h *History) Run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		if err := h.Sample(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads every series once, now.
func (h *History) Sample() error {
	mfs, err := h.cfg.Gatherer.Gather()
	if err != nil && len(mfs) == 0 {
		return fmt.Errorf("history: gather: %w", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	now := h.cfg.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.cfg.Series {
		cur := read(byName[s.Family], now)
		v, ok := value(s.Kind, h.prev[i], cur)
		h.prev[i] = cur
		if !ok {
			continue
		}
		if s.Scale != 0 {
			v *= s.Scale
		}
		pts := append(h.points[i], apiv1.MetricPoint{Time: now.UTC(), Value: v})
		cut := 0
		for cut < len(pts) && now.Sub(pts[cut].Time) > h.cfg.Window {
			cut++
		}
		h.points[i] = slices.Delete(pts, 0, cut)
	}
	return nil
}

// read sums a family's metrics.
func read(mf *dto.MetricFamily, at time.Time) reading {
	r := reading{at: at}
	if mf == nil {
		return r // a family with no series yet (no outlier) reads as zero
	}
	r.ok = true
	for _, m := range mf.GetMetric() {
		r.count++
		switch {
		case m.Gauge != nil:
			r.sum += m.Gauge.GetValue()
		case m.Counter != nil:
			r.sum += m.Counter.GetValue()
		case m.Untyped != nil:
			r.sum += m.Untyped.GetValue()
		case m.Histogram != nil:
			bs := m.Histogram.GetBucket()
			if r.bounds == nil {
				r.bounds, r.buckets = make([]float64, len(bs)), make([]float64, len(bs))
				for k, b := range bs {
					r.bounds[k] = b.GetUpperBound()
				}
			}
			for k, b := range bs {
				if k < len(r.buckets) {
					r.buckets[k] += float64(b.GetCumulativeCount())
				}
			}
			r.sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return r
}

// value is a series' value at cur, given the sample before.
func value(k Kind, prev, cur reading) (float64, bool) {
	switch k {
	case Gauge:
		return cur.sum, true
	case Count:
		return cur.count, true
	}
	if prev.at.IsZero() {
		return 0, false // a difference needs two samples
	}
	d := cur.sum - prev.sum
	if d < 0 {
		d = cur.sum // the process's counters started again
	}
	switch k {
	case Rate:
		secs := cur.at.Sub(prev.at).Seconds()
		if secs <= 0 {
			return 0, false
		}
		return d / secs, true
	case Increase:
		return d, true
	case P99:
		return quantile(0.99, prev, cur)
	}
	return 0, false
}

// quantile estimates the q quantile of the observations between two readings of a
// histogram, interpolating linearly within the bucket it falls in (as Prometheus's
// histogram_quantile does); past the last finite bound it is that bound.
func quantile(q float64, prev, cur reading) (float64, bool) {
	if len(cur.bounds) == 0 {
		return 0, false
	}
	delta := make([]float64, len(cur.buckets))
	for k := range delta {
		delta[k] = cur.buckets[k]
		if len(prev.buckets) == len(cur.buckets) && prev.sum <= cur.sum {
			delta[k] -= prev.buckets[k]
		}
	}
	total := cur.sum
	if prev.sum <= cur.sum {
		total -= prev.sum
	}
	if total <= 0 {
		return 0, false // nothing observed in the interval
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for k, upper := range cur.bounds {
		if delta[k] >= rank {
			if math.IsInf(upper, 1) {
				return lower, true
			}
			in := delta[k] - below
			if in <= 0 {
				return upper, true
			}
			return lower + (upper-lower)*(rank-below)/in, true
		}
		lower, below = upper, delta[k]
	}
	return lower, true // the rest is above the last bound
}

// Snapshot is every series' points, oldest first.
func (h *History) Snapshot() *apiv1.MetricsHistory {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &apiv1.MetricsHistory{IntervalSeconds: int(h.cfg.Interval / time.Second), WindowSeconds: int(h.cfg.Window / time.Second), Series: make([]apiv1.MetricSeries, len(h.cfg.Series))}
	for i, s := range h.cfg.Series {
		out.Series[i] = apiv1.MetricSeries{Name: s.Name, Help: s.Help, Unit: s.Unit, Points: slices.Clone(h.points[i])}
		if out.Series[i].Points == nil {
			out.Series[i].Points = []apiv1.MetricPoint{}
		}
	}
	return out
}
