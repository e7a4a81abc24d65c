package orchestrator

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// metrics are the orchestrator's collectors.
type metrics struct {
	validation *prometheus.HistogramVec
	providers  *prometheus.HistogramVec
	runs       *prometheus.CounterVec
	runTime    *prometheus.HistogramVec
	refusals   prometheus.Counter
	missed     *prometheus.CounterVec
	// staleRefused counts steps failed because the view was past their max_stale (or
	// --max-stale) and no static capability stood in
	staleRefused prometheus.Counter
}

// newMetrics creates the collectors and registers them with reg (none when nil).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "meshflows", "orchestrator"
	m := &metrics{
		validation: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "validation_duration_seconds",
			Help:    "Time to validate a workflow in all three layers (contract, resolution, providers), by contract status (passed, failed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"contract_status"}),
		providers: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "provider_validation_duration_seconds",
			Help:    "Time a provider took to validate one workflow step, by capability, provider and resulting status (passed, warning, failed, skipped).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"capability_id", "provider", "status"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "runs_total",
			Help: "Workflow runs finished, by workflow and status (succeeded, failed, cancelled)."}, []string{"workflow", "status"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "run_duration_seconds",
			Help:    "Duration of finished workflow runs, by workflow.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"workflow"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "runs_refused_total",
			Help: "Runs refused with 429 because a workflow (or the orchestrator) had its bound of runs in progress."}),
		staleRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stale_refused_total",
			Help: "Steps failed with 503 STALE_VIEW_EXPIRED: the registry did not answer, the last-known-good view was older than the step's max_stale (or --max-stale), and no static capability stood in."}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "schedule_fires_total",
			Help: "Scheduled fires by what became of them: ran, skipped (a scheduled run still in progress), missed (the orchestrator was busy or stopped)."}, []string{"workflow", "outcome"}),
	}
	for _, status := range []string{apiv1.StatusPassed, apiv1.StatusFailed} {
		m.validation.WithLabelValues(status)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.validation, m.providers, m.runs, m.runTime, m.refusals, m.missed, m.staleRefused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register orchestrator metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) validated(r *apiv1.ValidationResult, d time.Duration) {
	m.validation.WithLabelValues(r.ContractStatus).Observe(d.Seconds())
}

func (m *metrics) providerValidated(capabilityID, provider, status string, d time.Duration) {
	m.providers.WithLabelValues(capabilityID, provider, status).Observe(d.Seconds())
}

func (m *metrics) ran(r *apiv1.Run) {
	m.runs.WithLabelValues(r.Workflow, r.Status).Inc()
	m.runTime.WithLabelValues(r.Workflow).Observe(r.DurationMS / 1000)
}

func (m *metrics) refused() { m.refusals.Inc() }

func (m *metrics) fired(workflow, outcome string, n int) {
	m.missed.WithLabelValues(workflow, outcome).Add(float64(n))
}
