package apiv1

import "time"

// PathMetricsHistory is the registry's recent history of its own key series (discover
// permission): what a console draws without a Prometheus.
const PathMetricsHistory = "/v1/metrics/history"

// MetricsHistory is the answer of GET /v1/metrics/history: each series sampled every
// IntervalSeconds, oldest point first, over the last WindowSeconds at most (an hour by
// default; a registry that started later has fewer points).
type MetricsHistory struct {
	IntervalSeconds int            `json:"interval_seconds"`
	WindowSeconds   int            `json:"window_seconds"`
	Series          []MetricSeries `json:"series"`
}

// MetricSeries is one series: Name is stable (active_instances, heartbeats_per_second,
// evictions, discovery_p99_ms, outliers, watchers), Help says what it is, Unit how to read
// it.
type MetricSeries struct {
	Name   string        `json:"name"`
	Help   string        `json:"help"`
	Unit   string        `json:"unit"`
	Points []MetricPoint `json:"points"`
}

// MetricPoint is one sample. A rate or a quantile has no point for the first sample (there
// is nothing yet to take a difference from).
type MetricPoint struct {
	Time  time.Time `json:"t"`
	Value float64   `json:"v"`
}
