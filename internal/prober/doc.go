// Package prober owns the registry's active health checks: it probes every instance whose
// manifest declares a health endpoint — at once when a new incarnation registers, then every
// declared interval with jitter — within a bound of probes in flight, and reports each
// result (ok, fail, timeout, refused) to the registry, which hands it to the eligibility
// engine (internal/health) as evidence. Only the elected replica probes.
package prober
