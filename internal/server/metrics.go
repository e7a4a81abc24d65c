package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	discovery *prometheus.HistogramVec
	encodes   *prometheus.CounterVec
	held      *prometheus.HistogramVec
	deltas    *prometheus.CounterVec
	// deltaHeld and deltaEvicted: the delta log's bytes and the queries it dropped.
	deltaHeld    prometheus.Gauge
	deltaEvicted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		discovery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "discovery_duration_seconds",
			Help:    "Time to answer a discovery request, long-poll wait excluded, by endpoint (capabilities, routes).",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16), // 25µs .. 0.8s
		}, []string{"endpoint"}),
		encodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "discovery_encodes_total",
			Help: "Discovery answers built and encoded, by endpoint: once per (query, revision), however many requests ask at once.",
		}, []string{"endpoint"}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "long_poll_held_seconds",
			Help:    "Time a long poll was held before its answer was built anew, by endpoint (capabilities, routes): a costly answer is built at most once per --poll-spacing times its build time.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 13), // 1ms .. 4s
		}, []string{"endpoint"}),
		deltas: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "discovery_deltas_total",
			Help: "Answers to delta watches (delta=true), by kind: delta (the changes since the watcher's index) or reset (the whole answer: the registry could not tell the changes since it).",
		}, []string{"kind"}),
		deltaHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "delta_cache_bytes",
			Help: "Bytes of encoded delta-watch answers kept for the watchers of the same query and revision (at most --max-delta-cache-bytes, plus the answer just built).",
		}),
		deltaEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "delta_cache_evictions_total",
			Help: "Queries whose delta-watch answers were dropped, the least recently asked first, to keep the cache under --max-delta-cache-bytes.",
		}),
	}
	for _, k := range []string{"delta", "reset"} {
		m.deltas.WithLabelValues(k)
	}
	for _, e := range []string{"capabilities", "routes"} {
		m.encodes.WithLabelValues(e)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.discovery, m.encodes, m.held, m.deltas, m.deltaHeld, m.deltaEvicted} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register server metrics: %w", err)
			}
		}
	}
	return m, nil
}
