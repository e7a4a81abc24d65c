package provider

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	registerAttempts  prometheus.Counter
	registerSuccess   prometheus.Counter
	heartbeatFailures prometheus.Counter
	reregister        *prometheus.CounterVec
	heartbeatDuration prometheus.Histogram
}

// Reasons an Agent registers again, the label of meshflows_provider_registry_reregister_total.
const (
	ReasonNotFound           = "not_found"
	ReasonGenerationMismatch = "generation_mismatch"
	ReasonEpochChanged       = "epoch_changed"
	ReasonHeartbeatFailures  = "heartbeat_failures"
	ReasonUpdated            = "capabilities_updated"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "meshflows", "provider_registry"
	m := &metrics{
		registerAttempts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "register_attempts_total", Help: "Registration requests sent, successful or not."}),
		registerSuccess: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "register_success_total", Help: "Registrations the registry accepted."}),
		heartbeatFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "heartbeat_failures_total", Help: "Heartbeats that failed (transport errors and non-200 answers)."}),
		reregister: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reregister_total", Help: "Registrations made again after the first, by reason."}, []string{"reason"}),
		heartbeatDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "heartbeat_duration_seconds", Help: "Latency of heartbeat requests.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}), // 0.5 ms .. 4 s
	}
	for _, r := range []string{ReasonNotFound, ReasonGenerationMismatch, ReasonEpochChanged, ReasonHeartbeatFailures, ReasonUpdated} {
		m.reregister.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.registerAttempts, m.registerSuccess, m.heartbeatFailures, m.reregister, m.heartbeatDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register provider metrics: %w", err)
		}
	}
	return m, nil
}
