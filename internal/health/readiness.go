package health

import "time"

// at is the instant of Unix nanoseconds ns.
func at(ns int64) time.Time { return time.Unix(0, ns) }

// ready admits an instance that was not ready since its registration and now says it is:
// at once without a probe class, else as soon as its probes admit it (they may have already).
func (e *Engine) ready(in *instance, now time.Time) {
	if in.admitted || (in.Probe && in.troubles().okRun < e.cfg.AdmitAfter) {
		return
	}
	e.admit(in, now)
}
