package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	discovery *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		discovery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "meshflows", Subsystem: "registry", Name: "discovery_duration_seconds",
			Help:    "Time to answer a discovery request, long-poll wait excluded, by endpoint (capabilities, routes).",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16), // 25µs .. 0.8s
		}, []string{"endpoint"}),
	}
	if reg != nil {
		if err := reg.Register(m.discovery); err != nil {
			return nil, fmt.Errorf("register server metrics: %w", err)
		}
	}
	return m, nil
}
