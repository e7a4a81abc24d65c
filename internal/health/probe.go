package health

import (
	"fmt"
	"time"
)

// probe applies an active probe's result to in: admission by consecutive ok probes, the
// refused fast path, the consecutive rule of unhealthy_after, the failure score (score.go),
// and corroboration of silence.
func (e *Engine) probe(in *instance, ev Event) {
	t := in.trouble()
	t.lastProbe = Evidence{At: ev.At, Detail: "probe " + ev.Result}
	switch ev.Result {
	case ProbeOK:
		if in.quarantined(ev.At) {
			return // successes during quarantine do not count
		}
		t.okRun++
		t.badRun = 0
		if !in.admitted {
			e.clearCauses(in, ev.At, ReasonProbeRefused) // it answers: not the hard failure it was
			if t.okRun >= e.cfg.AdmitAfter && !in.notReady {
				e.admit(in, ev.At) // at once, or queued for its cohort's admission budget
			}
			return
		}
		if t.okRun >= e.unhealthyAfter(in)+2 {
			e.clearCauses(in, ev.At, ReasonProbeFailing, ReasonProbeRefused, ReasonSilentCorroborated, ReasonQuarantineEnded)
		}
		e.scoreCleared(in, ev.At)
	case ProbeFail, ProbeTimeout, ProbeRefused:
		t.okRun = 0
		if ev.Result != ProbeRefused {
			// only fail and timeout count towards PROBE_FAILING; a refusal is its own,
			// faster cause, and neither counts nor breaks the run
			if t.badRun++; t.badRun == 1 {
				t.badSince = observed(ev).UnixNano()
			}
		}
		if !in.admitted {
			// The hard-failure fast path holds for every incarnation discovery may answer,
			// one never admitted included (a restored one, answered in panic with the rest of
			// its group until probed): nothing listens where it says it does.
			if _, had := in.causes[ReasonProbeRefused]; ev.Result == ProbeRefused && !had {
				if in.causes == nil {
					in.causes = map[string]Evidence{}
				}
				in.causes[ReasonProbeRefused] = Evidence{At: ev.At, Detail: "probe refused before admission: connection refused or reset"}
			}
			return
		}
		if ev.Result == ProbeRefused {
			detail := "probe refused: connection refused or reset"
			if ev.Impostor != "" {
				detail = fmt.Sprintf("probe refused: the health endpoint answers as instance %q, not as this one (another process took its address)", ev.Impostor)
			}
			e.addCause(in, ev.At, ReasonProbeRefused, detail)
		}
		if n := e.unhealthyAfter(in); t.badRun >= n {
			e.addCause(in, ev.At, ReasonProbeFailing, fmt.Sprintf("%d consecutive failed probes (unhealthy_after %d), the last %s", t.badRun, n, ev.Result))
		}
		if ev.Result != ProbeRefused {
			e.scoreProbe(in, ev.At, ev.Result)
		}
		if e.silent(in, ev.At) {
			e.addCause(in, ev.At, ReasonSilentCorroborated, fmt.Sprintf("probe %s while silent since %s", ev.Result, instant(in.lastRenewal).Format(time.RFC3339)))
		}
	}
}

// refusedUnadmitted reports whether an instance never admitted had its last probes refused.
func (in *instance) refusedUnadmitted() bool {
	_, ok := in.causes[ReasonProbeRefused]
	return ok
}

// observed is when ev's evidence was observed: Observed, or At.
func observed(ev Event) time.Time {
	if !ev.Observed.IsZero() && ev.Observed.Before(ev.At) {
		return ev.Observed
	}
	return ev.At
}
