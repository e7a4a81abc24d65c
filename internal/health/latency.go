package health

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// ReasonOutlierLatency: an instance answering clearly slower than its peers of the same
// (capability, zone). It reduces the weight (degraded); it never withdraws: a slow shared
// dependency reduces weight, it does not drain.
const ReasonOutlierLatency = "OUTLIER_LATENCY"

// pooledP99 is the 99th percentile latency reported about in over the latency window ending
// at now: the mean of the reporters' p99s, each weighed by the requests of its window (a
// reporter that sent none does not count). ok is false when no outcome in the window carried
// one. The latency window is shorter than the outlier window that decides who is comparable:
// a mean of p99s over a minute moves a sixth of the way a window, so a slowdown took three or
// four report windows to be seen and as long to be forgotten.
func (e *Engine) pooledP99(in *instance, now time.Time) (p99 float64, ok bool) {
	from, to := now.Add(-e.cfg.LatencyWindow).UnixNano(), now.UnixNano()
	var sum, weight float64
	for _, o := range in.outcomes {
		if o.at <= from || o.at > to || o.p99 <= 0 {
			continue
		}
		w := float64(o.ok) + float64(o.errs)
		if w == 0 {
			w = 1
		}
		sum += w * float64(o.p99)
		weight += w
	}
	if weight == 0 {
		return 0, false
	}
	return sum / weight, true
}

// latencyOver reports whether p99 is a latency outlier against the median p99 of the other
// comparable instances: above latency_outlier_factor times it and above it plus
// latency_outlier_floor.
func (e *Engine) latencyOver(p99, median float64) bool {
	floor := float64(e.cfg.LatencyOutlierFloor) / float64(time.Millisecond)
	return p99 > e.cfg.LatencyOutlierFactor*median && p99 > median+floor
}

// judgeLatency applies the latency-outlier rule to a cohort's comparable members (in
// rotation, with outlier_min_volume requests over the outlier window): a member whose pooled
// p99 (over the latency window) is over the rule against the median of the others' is
// degraded with OUTLIER_LATENCY until a judgment finds its pooled p99 back under both, or,
// judged no more (too few requests), until one outlier_window after the last judgment that
// found it over (latencyUntil). Those it degrades anew are told at the next TakeEjected; the
// end by itself comes at latencyUntil (nextChange).
func (e *Engine) judgeLatency(ms []member, capability, zone string, now time.Time) {
	type timed struct {
		in  *instance
		p99 float64
	}
	var ts []timed
	for _, m := range ms {
		if p, ok := e.pooledP99(m.in, now); ok {
			ts = append(ts, timed{m.in, p})
		}
	}
	if len(ts) < 2 {
		return
	}
	sorted := make([]float64, len(ts))
	for i, t := range ts {
		sorted[i] = t.p99
	}
	sort.Float64s(sorted)
	for _, t := range ts {
		median := medianWithout(sorted, t.p99)
		if !e.latencyOver(t.p99, median) {
			if tr := t.in.tr; tr != nil && now.Before(tr.latencyUntil) {
				tr.latencyUntil = now // its p99 over the window is back under both: no longer an outlier
			}
			continue
		}
		tr := t.in.trouble()
		if !now.Before(tr.latencyUntil) { // not degraded for latency: it becomes so now
			tr.latencySince = now
			e.relEjected = append(e.relEjected, t.in.ID)
		}
		tr.latencyUntil = now.Add(e.cfg.OutlierWindow)
		tr.latency = Evidence{At: now, Detail: fmt.Sprintf("p99 %.1f ms over the last %s (mean of the reporters' p99s) against %.1f ms, the median of %d comparable peers of %s in %s (over %g × it and it + %s); degraded since %s until its p99 over %s is under both",
			t.p99, e.cfg.LatencyWindow, median, len(ts)-1, capability, zone, e.cfg.LatencyOutlierFactor, e.cfg.LatencyOutlierFloor,
			tr.latencySince.UTC().Format(time.RFC3339), e.cfg.LatencyWindow)}
	}
}

// latencyDegraded reports whether in is degraded as a latency outlier at now.
func (in *instance) latencyDegraded(now time.Time) bool {
	return in.tr != nil && now.Before(in.tr.latencyUntil)
}

// reasons of a degraded verdict: by latency, by self-report, or both (sorted)
var (
	reasonsLatency            = []string{ReasonOutlierLatency}
	reasonsLatencyAndDegraded = slices.Sorted(slices.Values([]string{ReasonOutlierLatency, ReasonSelfReportedDegraded}))
)
