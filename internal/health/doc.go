// Package health decides which instances are in rotation and why: the eligibility state
// machine of ELIGIBILITY.md as a pure engine. Evidence (registrations, heartbeats, probe
// results) goes in with its time; verdicts (state, weight, reasons), per (capability, zone)
// panic answers come out for any later instant. Identical evidence gives identical verdicts.
//
// Every rule of ELIGIBILITY.md is implemented: admission, slow start, degraded weight, the
// withdrawal causes and their clearing, silence, flapping quarantine, passive outlier ejection,
// draining, lease expiry, panic and self-preservation. The owner calls Tick regularly; lease
// expiry and self-preservation happen at ticks. Raising the owner's incident on a quarantine
// is left to the owner (not yet wired).
package health
