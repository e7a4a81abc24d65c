package kubesync

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the syncer's series (made once and given to every Syncer a process runs, one
// per term as the leader): its instances by state, how long a change takes to reach the
// registry, the errors by kind, whether it leads and when it last reconciled (what the
// MeshFlowsKubeSyncStalled alert watches).
type Metrics = metrics

// NewMetrics makes the series and registers them on reg (nil: registered nowhere).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) { return newMetrics(reg) }

// metrics are the syncer's series: its instances by state, how long a change takes to
// reach the registry, the errors by kind and when it last reconciled (what the
// MeshFlowsKubeSyncStalled alert watches).
type metrics struct {
	instances     *prometheus.GaugeVec
	reconcile     prometheus.Histogram
	errors        *prometheus.CounterVec
	writes        *prometheus.CounterVec
	lastReconcile prometheus.Gauge
	leader        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_kubesync_instances",
			Help: "Instances the syncer owns, by the state of their endpoints (ready, not_ready, terminating)."}, []string{"state"}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshflows_kubesync_reconcile_seconds",
			Help:    "Time from the first change of a batch seen in Kubernetes to its writes answered by the registry.",
			Buckets: []float64{.005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5, 10, 30}}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_kubesync_errors_total",
			Help: "Errors of the syncer by kind: register, heartbeat, deregister, list (the registry), annotation (a Service's), event (recording one), lease (leader election)."}, []string{"kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_kubesync_registry_writes_total",
			Help: "Writes the syncer sent the registry, by kind: register, heartbeat, deregister."}, []string{"kind"}),
		lastReconcile: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshflows_kubesync_last_reconcile_timestamp_seconds",
			Help: "When the syncer last brought the registry to what Kubernetes says (a reconcile or a round of renewals), as a Unix time."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshflows_kubesync_leader",
			Help: "1 while this replica holds the syncer's Lease and syncs, 0 while it stands by."}),
	}
	for _, k := range []string{"register", "heartbeat", "deregister", "list", "annotation", "event", "lease"} {
		m.errors.WithLabelValues(k)
	}
	for _, k := range []string{"register", "heartbeat", "deregister"} {
		m.writes.WithLabelValues(k)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.instances, m.reconcile, m.errors, m.writes, m.lastReconcile, m.leader} {
			if err := reg.Register(c); err != nil {
				return nil, errors.Join(errors.New("kubesync: register the metrics"), err)
			}
		}
	}
	return m, nil
}
