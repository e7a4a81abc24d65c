package nameserver

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	queries *prometheus.CounterVec
	sources *prometheus.GaugeVec
	// truncations counts answers that left records out to fit, by transport.
	truncations *prometheus.CounterVec

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
	m.truncations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_dns_truncated_total",
		Help: "DNS answers that left records out to fit their message, by transport: udp (TC set, the client retries over TCP) or tcp (past 64 KiB; the most preferred records kept)."}, []string{"transport"})
	m.truncations.WithLabelValues("udp")
	m.truncations.WithLabelValues("tcp")
	m.sources.WithLabelValues("fresh")
	m.sources.WithLabelValues("snapshot")
	for _, qt := range []string{"SRV", "A", "AAAA", "TXT"} { // the usual series exist from the start, at 0
		for _, rc := range []string{"NOERROR", "NXDOMAIN"} {
			m.queries.WithLabelValues(qt, rc)
		}
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.queries, m.sources, m.truncations} {
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
