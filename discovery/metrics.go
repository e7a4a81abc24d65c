package discovery

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	hits, misses, staleServed prometheus.Counter
	staleRefused              prometheus.Counter
	deltas                    *prometheus.CounterVec
	refused                   *prometheus.CounterVec
	evicted                   prometheus.Counter
	forgotten                 prometheus.Counter
}

// stats is read when metrics are scraped: the oldest view's age, the newest revision and
// the number of entries cached.
func (c *Client) stats() (age float64, revision float64, entries float64) {
	age, revision, entries, _ = c.statsStale()
	return age, revision, entries
}

// statsStale is stats, and the age of the oldest view whose last attempt to reach the
// registry failed (0: none): how long this consumer has routed on a last-known-good view.
func (c *Client) statsStale() (age float64, revision float64, entries float64, stale float64) {
	now := c.cfg.Now()
	c.mu.Lock()
	views := make([]interface {
		stats() (ok bool, lkgAt time.Time, rev int64, n int)
		cause() error
	}, 0, len(c.caps)+1)
	for _, v := range c.caps {
		views = append(views, v)
	}
	views = append(views, c.routes)
	c.mu.Unlock()
	for _, v := range views {
		ok, at, rev, n := v.stats()
		if !ok {
			continue
		}
		age = max(age, now.Sub(at).Seconds())
		revision = max(revision, float64(rev))
		entries += float64(n)
		if v.cause() != nil {
			stale = max(stale, now.Sub(at).Seconds())
		}
	}
	return age, revision, entries, stale
}

func (v *view[T]) stats() (bool, time.Time, int64, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lkg == nil {
		return false, time.Time{}, 0, 0
	}
	return true, v.lkgAt, v.lkg.revision, v.kind.size(v.lkg.body)
}

func newMetrics(reg prometheus.Registerer, consumer string, c *Client) (*metrics, error) {
	const ns, sub = "meshflows", "discovery"
	m := &metrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cache_hits_total", Help: "Reads served from a view refreshed within the TTL."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cache_misses_total", Help: "Reads that asked the registry."}),
		staleServed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_served_total", Help: "Reads answered from the last-known-good view because the registry could not be reached."}),
		staleRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_refused_total", Help: "Reads refused because the last-known-good view was older than the read's own max_stale while the registry could not be reached (an operation that needs prompt revocation)."}),
		deltas: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "watch_deltas_total", Help: "Answers of delta watches, by kind: delta (the changes since the view's revision) or reset (the whole answer)."}, []string{"kind"}),
	}
	for _, k := range []string{"delta", "reset"} {
		m.deltas.WithLabelValues(k)
	}
	m.evicted = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "views_evicted_total", Help: "Capability views dropped, the least recently read first, to keep at most MaxViews (one per distinct query); a dropped view's next read asks the registry."})
	m.forgotten = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "unreachable_forgotten_total", Help: "Instances dropped from the views because they refused a connection while the views held them only from before a registry restart (Unreachable)."})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
		Name: "answers_refused_total", Help: "Registry answers refused as older than the view held, by reason: older_revision (of the same epoch) or older_epoch (while the view's registry still answers); a refused answer renews nothing."}, []string{"reason"})
	for _, r := range []string{"older_revision", "older_epoch"} {
		m.refused.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	if consumer != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"consumer": consumer}, reg)
	}
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "age_seconds",
			Help: "Time since the oldest cached view's last successful refresh."},
			func() float64 { a, _, _ := c.stats(); return a }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "stale_seconds",
			Help: "Age of the oldest view served from last-known-good because the registry could not be reached at its last try (0: every view's last try reached it). Over twice the heartbeat interval, the registry is unreachable from this consumer."},
			func() float64 { _, _, _, s := c.statsStale(); return s }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "revision",
			Help: "Newest registry revision held."},
			func() float64 { _, r, _ := c.stats(); return r }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "entries",
			Help: "Entries held in all cached views."},
			func() float64 { _, _, n := c.stats(); return n }),
	}
	for _, col := range append(gauges, m.hits, m.misses, m.staleServed, m.staleRefused, m.deltas, m.refused, m.evicted, m.forgotten) {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register discovery metrics: %w", err)
		}
	}
	return m, nil
}
