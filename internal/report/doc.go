// Package report owns the queue by which a gateway or an orchestrator tells the registry what
// it saw (POST /v1/reports): events for the registry's journal, and conditions that raise and
// clear incidents. Sending happens in Run, in batches, retried while the registry is away;
// the queue is bounded, and what it drops is counted and logged, never lost in silence.
package report
