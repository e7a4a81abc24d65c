// Package history keeps the last hour of a process's own key series in memory, sampled from
// its Prometheus registry, so that a console can draw them without a Prometheus.
package history
