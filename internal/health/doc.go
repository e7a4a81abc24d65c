// Package health decides which instances are in rotation and why: the eligibility state
// machine of ELIGIBILITY.md as a pure engine. Evidence (registrations, heartbeats, probe
// results) goes in with its time; verdicts (state, weight, reasons), per (capability, zone)
// panic answers come out for any later instant. Identical evidence gives identical verdicts.
//
// Implemented so far: admission, slow start, degraded weight, the probe, self-report and
// silence-corroboration withdrawal causes and their clearing, silence, flapping quarantine,
// passive outlier ejection (with its cap per group), draining, lease expiry and panic. Not
// yet: self-preservation (scenarios that need it are refused with ErrUnsupported) and the
// owner's incident on a quarantine.
package health
