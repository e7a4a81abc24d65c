package health

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// states lists every state, for the per-state gauge.
var states = []string{apiv1.EligibilityUnknown, apiv1.EligibilitySlowStart, apiv1.EligibilityServing, apiv1.EligibilityDegraded, apiv1.EligibilityReturning,
	apiv1.EligibilityWithdrawn, apiv1.EligibilityEvacuated, apiv1.EligibilityQuarantined, apiv1.EligibilityDraining, apiv1.EligibilityAbsent}

type monitorMetrics struct {
	transitions *prometheus.CounterVec
	// entered holds transitions' counter of each (state entered, first reason) counted: a
	// sweep that ends a fleet's slow starts counts one per instance, and looking the counter
	// up by its labels was a tenth of that sweep. Used under the monitor's lock.
	entered     map[[2]string]prometheus.Counter
	ejections   prometheus.Counter
	quarantines prometheus.Counter
	disputed    prometheus.Counter
	cohorts     prometheus.Counter
	// the budgets (budget.go)
	withdrawal, admission *prometheus.HistogramVec
}

// monitorCollector reports the monitor's gauges at scrape time.
type monitorCollector struct {
	m                          *Monitor
	instances, panics, preserv *prometheus.Desc
	outliers, zoneOutliers     *prometheus.Desc
	queued                     *prometheus.Desc
}

func (c *monitorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.instances
	ch <- c.panics
	ch <- c.preserv
	ch <- c.outliers
	ch <- c.zoneOutliers
	ch <- c.queued
}

func (c *monitorCollector) Collect(ch chan<- prometheus.Metric) {
	byState, panics, sp := c.m.counts()
	for _, s := range states {
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(byState[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(c.panics, prometheus.GaugeValue, float64(panics))
	v := 0.0
	if sp {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.preserv, prometheus.GaugeValue, v)
	// only the cohorts and zones that are outliers have a series: no per-instance label, and
	// nothing for the healthy many
	byCohort, zones := c.m.outliers()
	for k, n := range byCohort {
		ch <- prometheus.MustNewConstMetric(c.outliers, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for _, z := range zones {
		ch <- prometheus.MustNewConstMetric(c.zoneOutliers, prometheus.GaugeValue, z.ErrorShare, z.CapabilityID, z.Zone)
	}
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(c.m.admissionsQueued()))
}

func newMonitorMetrics(reg prometheus.Registerer, m *Monitor) (*monitorMetrics, error) {
	mm := &monitorMetrics{
		entered: map[[2]string]prometheus.Counter{},
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_eligibility_transitions_total",
			Help: "Changes of eligibility state, by the state entered and its first reason."}, []string{"to", "reason"}),
		ejections: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_eligibility_ejections_total",
			Help: "Passive (outlier) ejections of instances on gateway outcomes."}),
		disputed: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_eligibility_outcomes_disputed_total",
			Help: "Outcomes ignored because other reporters saw the instance healthy in the outlier window."}),
		quarantines: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_eligibility_quarantines_total",
			Help: "Instances quarantined for flapping."}),
		withdrawal: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshflows_withdrawal_seconds",
			Help:    "From the first evidence of a failure to the instance's withdrawal (the budget is 5 s), by cause class: probe, silence, passive, self_report, operator, flapping.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120}}, []string{"cause"}),
		admission: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshflows_admission_seconds",
			Help:    "From an incarnation's registration to its entry into rotation (the budget is 30 s), by how it is admitted: probe (its probes) or none (no probe class).",
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}}, []string{"readiness"}),
		cohorts: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshflows_eligibility_cohort_flaps_total",
			Help: "Cohort flap events: more than flap_cohort_share of a (capability, zone) left rotation within one flap window (one event, no quarantines)."}),
	}
	for _, c := range CauseClasses { // every series exists from the start
		mm.withdrawal.WithLabelValues(c)
	}
	mm.admission.WithLabelValues("probe")
	mm.admission.WithLabelValues("none")
	if reg == nil {
		return mm, nil
	}
	c := &monitorCollector{m: m,
		instances: prometheus.NewDesc("meshflows_eligibility_instances", "Instances by eligibility state.", []string{"state"}, nil),
		panics:    prometheus.NewDesc("meshflows_eligibility_panic_groups", "(capability, zone) groups in panic: discovery returns all their instances.", nil, nil),
		preserv:   prometheus.NewDesc("meshflows_eligibility_self_preservation", "1 while self-preservation suspends lease-expiry eviction.", nil, nil),
		outliers: prometheus.NewDesc("meshflows_outlier_instances", "Instances ejected as relative outliers (failing clearly more than their peers), by capability and zone; only cohorts with one have a series.",
			[]string{"capability", "zone"}, nil),
		queued: prometheus.NewDesc("meshflows_eligibility_admissions_queued", "Instances whose probes admit them waiting for their cohort's admission budget (--admit-rate), ADMISSION_QUEUED.", nil, nil),
		zoneOutliers: prometheus.NewDesc("meshflows_zone_outlier_error_share", "The error share over the outlier window of a zone that is a zone outlier of a capability (failing as a whole against the other zones); only such zones have a series.",
			[]string{"capability", "zone"}, nil),
	}
	for _, col := range []prometheus.Collector{mm.transitions, mm.ejections, mm.quarantines, mm.disputed, mm.cohorts, mm.withdrawal, mm.admission, c} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register eligibility metrics: %w", err)
		}
	}
	return mm, nil
}

// transition counts one change of state.
func (mm *monitorMetrics) transition(t Transition) {
	reason := ""
	if len(t.Reasons) > 0 {
		reason = t.Reasons[0]
	}
	k := [2]string{t.To, reason}
	c, ok := mm.entered[k]
	if !ok {
		c = mm.transitions.WithLabelValues(t.To, reason)
		mm.entered[k] = c
	}
	c.Inc()
	if t.To == apiv1.EligibilityQuarantined {
		mm.quarantines.Inc()
	}
}

// cohortFlaps counts a cohort that started flapping together.
func (mm *monitorMetrics) cohortFlaps(c CohortChange) {
	if c.Flapping {
		mm.cohorts.Inc()
	}
}
