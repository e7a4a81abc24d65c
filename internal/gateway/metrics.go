package gateway

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests    *prometheus.CounterVec
	upstream    *prometheus.HistogramVec
	retries     prometheus.Counter
	derivations prometheus.Counter
	divergence  prometheus.Counter
	stale       prometheus.Counter // requests refused on a route's max_stale
	impostors   prometheus.Counter // answers refused for naming another instance

	// Resolved series for the hot path: a label lookup per request costs more than the
	// counter itself. byCode is read only once built: a source's counters by status code,
	// each resolved at its first use.
	byCode     map[string]*codeCounters
	upstreamBy map[string]prometheus.Observer
}

// codeCounters holds one source's request counters by status code (100-599).
type codeCounters [500]atomic.Pointer[prometheus.Counter]

// count counts one request answered with code on a route of source. The series is
// resolved once per (source, code); a key was built per request to find it, an allocation
// per forwarded request.
func (m *metrics) count(source string, code int) {
	cs := m.byCode[source]
	if cs == nil || code < 100 || code > 599 {
		m.requests.WithLabelValues(source, strconv.Itoa(code)).Inc() // outside the table: resolved per call
		return
	}
	slot := &cs[code-100]
	if c := slot.Load(); c != nil {
		(*c).Inc()
		return
	}
	c := m.requests.WithLabelValues(source, strconv.Itoa(code)) // the same series for every caller: a race stores it twice
	slot.Store(&c)
	c.Inc()
}

func (m *metrics) observe(source string, d time.Duration) {
	if o, ok := m.upstreamBy[source]; ok {
		o.Observe(d.Seconds())
	}
}

func newMetrics(reg prometheus.Registerer, g *Gateway) (*metrics, error) {
	const ns, sub = "meshflows", "gateway"
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Requests by route source (static, dynamic, none) and status code."}, []string{"source", "code"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "upstream_duration_seconds",
			Help: "Time from forwarding a request to the end of its response, by route source.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)},
			[]string{"source"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Requests (any method) retried on another instance after a failure to connect, when nothing had been sent."}),
		derivations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "table_derivations_total",
			Help: "Routing tables derived (whole, or by applying a routes-view change to the incremental derivation)."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stale_refused_total",
			Help: "Requests answered 503 STALE_VIEW_EXPIRED because the routes view was older than their route's max_stale (or --max-stale) while the registry was unreachable."}),
		impostors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "impostor_answers_total",
			Help: "Upstream answers refused (502) because their X-Instance named another instance than the one the request was sent to: another process took its address."}),
		divergence: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "routes_divergence_total",
			Help: "Full derivations (every --routes-verify-every row changes) that found the incremental table different; the full table then serves."}),
	}
	m.upstreamBy = map[string]prometheus.Observer{"static": m.upstream.WithLabelValues("static"), "dynamic": m.upstream.WithLabelValues("dynamic")}
	m.byCode = map[string]*codeCounters{"static": new(codeCounters), "dynamic": new(codeCounters), "none": new(codeCounters)}
	if reg == nil {
		return m, nil
	}
	gauge := func(name, help string, f func(*state) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, func() float64 {
			if st := g.state.Load(); st != nil {
				return f(st)
			}
			return 0
		})
	}
	cs := []prometheus.Collector{m.requests, m.upstream, m.retries, m.derivations, m.divergence, m.stale, m.impostors,
		gauge("table_age_seconds", "Age of the routes view the table was derived from (grows while the registry is unreachable).",
			func(*state) float64 { _, age := g.source(); return age.Seconds() }),
		gauge("table_revision", "Registry revision the table was derived from.", func(st *state) float64 { return float64(st.revision) }),
		gauge("table_routes", "Routes in the table.", func(st *state) float64 { return float64(len(st.table.Entries())) }),
		gauge("rejected_manifests", "Manifests rejected by the last derivation.", func(st *state) float64 { return float64(len(st.table.Rejected())) }),
		gauge("conflicts", "Contested (pattern, method) pairs in the table.", func(st *state) float64 { return float64(len(st.table.Conflicts())) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register gateway metrics: %w", err)
		}
	}
	return m, nil
}
