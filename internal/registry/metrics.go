package registry

import (
	"fmt"
	apiv1 "github.com/meshflows/meshflows/api/v1"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	registerSuccess  prometheus.Counter
	registerFail     *prometheus.CounterVec
	heartbeatSuccess prometheus.Counter
	heartbeatFail    *prometheus.CounterVec
	evictions        prometheus.Counter
	sweep            prometheus.Histogram
	// refusableEndpoints counts the registrations held at start whose endpoint a new
	// registration would be refused for.
	refusableEndpoints prometheus.Gauge
	outcomes           *prometheus.CounterVec
	watchesShed        prometheus.Counter
	propagation        prometheus.Histogram
}

// newMetrics creates the registry's collectors and registers them with reg (none when nil).
// The gauges read the store when scraped, so the hot paths pay nothing for them.
func newMetrics(reg prometheus.Registerer, r *Registry) (*metrics, error) {
	const ns, sub = "meshflows", "registry"
	m := &metrics{
		registerSuccess: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "register_success_total", Help: "Registrations accepted."}),
		registerFail: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "register_fail_total", Help: "Registrations refused, by reason: invalid (malformed JSON, a duplicate key, a wrong type, a field that breaks the rules), too_large (413), rate_limited (429), shed (429: over --reconnect-rate), forbidden, store."}, []string{"reason"}),
		heartbeatSuccess: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "heartbeat_success_total", Help: "Heartbeats accepted."}),
		heartbeatFail: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "heartbeat_fail_total", Help: "Heartbeats refused, by reason (invalid, not_found, generation_mismatch, forbidden, store)."}, []string{"reason"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_evictions_total", Help: "Instances evicted because their lease expired."}),
		sweep: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "sweep_duration_seconds", Help: "How long a sweep (lease expiry, eligibility verdicts due by time, panic flags, timeline) took.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		refusableEndpoints: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "refusable_endpoints", Help: "Registrations held at start (restored or shared) whose endpoint breaks the endpoint rules; each is logged."}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outcomes_total", Help: "Outcomes reported (POST /v1/outcomes), one per instance of a batch, by result: accepted, unknown_instance and stale_generation (ignored), invalid (the batch was refused with 400), rate_limited (429)."}, []string{"result"}),
		watchesShed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "watches_shed_total", Help: "Watches that needed a whole answer (index 0, or an epoch of before a restart or a failover) answered 429 over --reconnect-rate."}),
		propagation: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns,
			Name: "withdrawal_propagation_seconds", Help: "The second half of the withdrawal budget: from a withdrawal verdict to a watcher (a long poll that held an answer before it) answered with it, one observation per watcher and withdrawal; its top is the slowest watcher. The first half, evidence to verdict, is meshflows_withdrawal_seconds.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
	}
	for _, result := range []string{outcomeAccepted, outcomeUnknown, outcomeStale, outcomeInvalid, outcomeRateLimited} {
		m.outcomes.WithLabelValues(result)
	}
	for _, reason := range []string{"invalid", "too_large", "rate_limited", "shed", "forbidden", "store"} {
		m.registerFail.WithLabelValues(reason)
	}
	for _, reason := range []string{"invalid", "not_found", "generation_mismatch", "forbidden", "store"} {
		m.heartbeatFail.WithLabelValues(reason)
	}
	if reg == nil {
		return m, nil
	}
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "active_instances", Help: "Instances with a live registration."},
			func() float64 { n, _ := r.store.Counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "active_capabilities", Help: "Capabilities of the instances with a live registration."},
			func() float64 { _, c := r.store.Counts(); return float64(c) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "instances_missing_heartbeats", Help: "Instances that missed two heartbeats or more in a row (no renewal for over twice the heartbeat interval): the registry's own signal, for every instance, those kube-sync keeps included, without scraping a provider. GET /v1/services lists them (reason SILENT)."},
			func() float64 { missing, _ := r.fleetCounts(); return float64(missing) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns,
			Name: "instances_without_readiness", Help: "Instances nothing says are ready to serve: no probe class (the manifest declares no health endpoint) and no runtime reporting readiness; they are in rotation on their registration and heartbeats alone (readiness none)."},
			func() float64 { _, none := r.fleetCounts(); return float64(none) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "watchers", Help: "Discovery requests waiting in a long poll."},
			func() float64 { return float64(r.watchers.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "revision", Help: "Current revision of the visible state."},
			func() float64 { rev, _ := r.store.Watch(); return float64(rev) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "complete", Help: "1 when discovery answers are complete, 0 inside the warm-up window after an empty start."},
			func() float64 {
				if r.State().Complete {
					return 1
				}
				return 0
			}),
	}
	for _, c := range append(gauges, m.registerSuccess, m.registerFail, m.heartbeatSuccess, m.heartbeatFail, m.evictions, m.sweep, m.refusableEndpoints, m.outcomes, m.watchesShed, m.propagation) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register registry metrics: %w", err)
		}
	}
	return m, nil
}

// fleetCounts counts, in one walk of the records, the instances that missed two heartbeats
// or more and those without readiness: the two gauges of one scrape share it (it is kept a
// second), instead of walking the fleet once each.
func (r *Registry) fleetCounts() (missing, noReadiness int) {
	r.counts.mu.Lock()
	defer r.counts.mu.Unlock()
	now := r.cfg.Now()
	if c := &r.counts; !c.at.IsZero() && now.Sub(c.at) < time.Second && !now.Before(c.at) {
		return c.missing, c.noReadiness
	}
	for _, rec := range r.store.Records() {
		if last := rec.LeaseExpiresAt().Add(-r.cfg.LeaseTTL); now.Sub(last) > 2*r.cfg.HeartbeatInterval {
			missing++
		}
		if rec.Readiness() == apiv1.ReadinessNone {
			noReadiness++
		}
	}
	r.counts.at, r.counts.missing, r.counts.noReadiness = now, missing, noReadiness
	return missing, noReadiness
}

// fleetCountsCache is fleetCounts' last answer.
type fleetCountsCache struct {
	mu                   sync.Mutex
	at                   time.Time
	missing, noReadiness int
}
