// Package orchestrator stores workflows, validates them in the three layers of package
// workflow, and runs them: each service_call step is resolved through discovery (or the
// static capability configuration when the registry has never answered) to an instance,
// deterministically, and invoked at /v1/capabilities/{id}/invoke. Runs are triggered over
// HTTP or on a schedule, one at a time per workflow, and kept in a bounded history with
// success rate and p95 latency.
package orchestrator
