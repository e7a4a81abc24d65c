// Package health decides which instances are in rotation and why (the rules of
// docs/reference/eligibility.md). Engine is the pure state machine: evidence (registrations,
// heartbeats, probe results, gateway outcomes) goes in with its time; verdicts (state, weight,
// reasons with evidence) and per (capability, zone) panic answers come out for any later
// instant, and identical evidence gives identical verdicts. Monitor owns an Engine for a
// running registry: safe for concurrent use, it publishes verdicts with a revision watchers
// wait on, keeps each instance's last transitions and the 24-hour timeline, and hands every
// transition to its owner's hook (the registry raises incidents from them). With a store
// that replicas share, one monitor judges and the others follow what it publishes, deriving
// what it need not publish (replicas.go).
//
// What it does not own: probing (internal/prober produces the probe results) and the
// scenario files that pin the rules down (internal/health/scenario runs them).
package health
