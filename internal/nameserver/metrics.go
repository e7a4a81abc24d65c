package nameserver

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	queries *prometheus.CounterVec
	sources *prometheus.GaugeVec

	mu   sync.Mutex
	last string
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_dns_queries_total",
			Help: "DNS queries answered, by query type and response code."}, []string{"qtype", "rcode"}),
		sources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_dns_answer_source",
			Help: "1 for the source of the view DNS answers from: fresh (the registry answers) or snapshot (last-known-good)."}, []string{"source"}),
	}
	m.sources.WithLabelValues("fresh")
	m.sources.WithLabelValues("snapshot")
	for _, qt := range []string{"SRV", "A", "AAAA", "TXT"} { // the usual series exist from the start, at 0
		for _, rc := range []string{"NOERROR", "NXDOMAIN"} {
			m.queries.WithLabelValues(qt, rc)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.queries, m.sources} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register dns metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) query(qtype, rcode string) { m.queries.WithLabelValues(qtype, rcode).Inc() }

// source records the source answered from: cache and fresh count as fresh.
func (m *metrics) source(s string) {
	if s != "snapshot" {
		s = "fresh"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s == m.last {
		return
	}
	m.last = s
	for _, v := range []string{"fresh", "snapshot"} {
		g := 0.0
		if v == s {
			g = 1
		}
		m.sources.WithLabelValues(v).Set(g)
	}
}
