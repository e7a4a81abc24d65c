package auth

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/client"
)

// CertSource is what holds certificates loaded from files: a server's (ServerCerts) or a
// client's (client.TLSFiles).
type CertSource interface {
	Certificates() []client.Certificate
	ReloadFailures() int64
}

// CertMetrics exports, for one component, meshflows_certificate_expiry_timestamp_seconds of
// every certificate its sources hold, by role (server, client, ca) and subject, and
// meshflows_certificate_reload_failures_total. CAs of one subject — an old and a new one
// side by side in a bundle during a rotation, or the same CA in a server's and a client's
// bundle — are one series: the latest expiry, the one that will still be there.
type CertMetrics struct {
	component      string
	mu             sync.Mutex
	sources        []CertSource
	expiry, failed *prometheus.Desc
}

// NewCertMetrics returns the collector of component's certificates, with sources.
func NewCertMetrics(component string, sources ...CertSource) *CertMetrics {
	return &CertMetrics{component: component, sources: sources,
		expiry: prometheus.NewDesc("meshflows_certificate_expiry_timestamp_seconds", "When a certificate the component has loaded expires (Unix seconds), by role (server, client, ca) and subject.",
			[]string{"component", "role", "subject"}, nil),
		failed: prometheus.NewDesc("meshflows_certificate_reload_failures_total", "Certificate, key or CA files that changed and were refused (the set in force stays).",
			[]string{"component"}, nil)}
}

// Add adds a source.
func (m *CertMetrics) Add(s CertSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, s)
}

// Describe and Collect make CertMetrics a Prometheus collector.
func (m *CertMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.expiry
	ch <- m.failed
}

func (m *CertMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := append([]CertSource(nil), m.sources...)
	m.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	type key struct{ role, subject string }
	latest := map[key]time.Time{}
	var failures int64
	for _, s := range sources {
		for _, c := range s.Certificates() {
			if k := (key{c.Role, c.Subject}); c.NotAfter.After(latest[k]) {
				latest[k] = c.NotAfter
			}
		}
		failures += s.ReloadFailures()
	}
	for k, at := range latest {
		ch <- prometheus.MustNewConstMetric(m.expiry, prometheus.GaugeValue, float64(at.Unix()), m.component, k.role, k.subject)
	}
	ch <- prometheus.MustNewConstMetric(m.failed, prometheus.CounterValue, float64(failures), m.component)
}
