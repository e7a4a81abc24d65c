package health

import (
	"cmp"
	"fmt"
	"time"
)

// Explain returns the verdict on id at now with the evidence behind each reason.
func (e *Engine) Explain(id string, now time.Time) (Verdict, []Reason) {
	v := e.Verdict(id, now)
	in, ok := e.instances[id]
	reasons := make([]Reason, 0, len(v.Reasons))
	if !ok {
		return v, reasons
	}
	for _, code := range v.Reasons {
		ev, isCause := in.causes[code]
		switch {
		case isCause:
		case code == ReasonAdmitting:
			t := in.troubles()
			ev = Evidence{At: t.lastProbe.At, Detail: fmt.Sprintf("%d of %d consecutive ok probes needed to admit; last: %s", t.okRun, e.cfg.AdmitAfter, cmp.Or(t.lastProbe.Detail, "no probe yet"))}
		case code == ReasonSlowStart:
			ev = Evidence{At: instant(in.rotationSince), Detail: fmt.Sprintf("entered rotation; weight ramps to 100 over %s", e.cfg.SlowStart)}
		case code == ReasonSilent:
			ev = Evidence{At: instant(in.lastRenewal), Detail: fmt.Sprintf("no renewal for more than %s", 2*e.cfg.HeartbeatInterval)}
		case code == ReasonOutlierLatency:
			ev = in.troubles().latency
		case code == ReasonRuntimeNotReady && in.notReady:
			ev = Evidence{At: instant(in.registeredAt), Detail: "registered not ready (publish when ready): answered nowhere until a heartbeat says ok"}
		case code == ReasonSelfReportedDegraded:
			ev = Evidence{At: instant(in.lastHealthAt), Detail: "heartbeat health " + in.lastHealth}
		case code == ReasonFlapping:
			t := in.troubles()
			ev = Evidence{At: t.quarantineUntil, Detail: fmt.Sprintf("quarantine %d ends at this time; probe successes during it do not count", t.quarantines)}
		case code == ReasonDraining:
			ev = Evidence{Detail: "deregistered; out of rotation until the gateways acknowledge"}
		case code == ReasonEvacuated || code == ReasonReturning:
			ev = e.evacuationEvidence(in, now, code)
		}
		reasons = append(reasons, Reason{Code: code, Evidence: ev})
	}
	if !in.Probe && in.present {
		reasons = append(reasons, Reason{Code: "NO_PROBE_CLASS", Evidence: Evidence{Detail: "the manifest declares no health endpoint: no probe evidence"}})
	}
	return v, reasons
}
