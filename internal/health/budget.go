package health

import (
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// The two budgets (docs/reference/eligibility.md, "Budgets"): a withdrawal within 5 s of its
// first evidence, an admission within 30 s of the registration. The monitor measures both at
// every transition that completes one (meshflows_withdrawal_seconds,
// meshflows_admission_seconds), and alerts compare their 99th percentiles with the budgets.

// Budgets, in seconds: what the alerts compare the 99th percentiles with.
const (
	WithdrawalBudget = 5 * time.Second
	AdmissionBudget  = 30 * time.Second
)

// causeClass groups a withdrawal's cause for the budget's label.
func causeClass(reason string) string {
	switch reason {
	case ReasonProbeFailing, ReasonProbeRefused, ReasonProbeScore:
		return "probe"
	case ReasonSilentCorroborated:
		return "silence"
	case ReasonOutlierErrorRate, ReasonOutlierConnect, ReasonOutlierRelative:
		return "passive"
	case ReasonSelfReportedFailing, ReasonRuntimeNotReady:
		return "self_report"
	case ReasonOperatorWithdrawn, ReasonOperatorForced:
		return "operator"
	case ReasonQuarantineEnded:
		return "flapping"
	}
	return "other"
}

// CauseClasses are the values of the withdrawal budget's cause label.
var CauseClasses = []string{"probe", "silence", "passive", "self_report", "operator", "flapping", "other"}

// withdrawalEvidence returns, for an instance that has just entered withdrawn, the earliest
// instant its evidence was observed and the class of that cause: the first failure of a
// consecutive run (PROBE_FAILING), the evidence that raised the score from 0 (PROBE_SCORE),
// the cause's own evidence otherwise.
func (e *Engine) withdrawalEvidence(in *instance) (time.Time, string) {
	var first time.Time
	class := ""
	for reason, ev := range in.causes {
		at := ev.At
		if t := in.tr; t != nil {
			switch {
			case reason == ReasonProbeFailing && t.badSince > 0:
				at = instant(t.badSince)
			case reason == ReasonProbeScore && t.scoreSince > 0:
				at = instant(t.scoreSince)
			}
		}
		if first.IsZero() || at.Before(first) || at.Equal(first) && causeClass(reason) < class {
			first, class = at, causeClass(reason)
		}
	}
	return first, class
}

// budgets measures, at a transition of v from old to nv at now, the budget it completes: an
// admission (an incarnation's first entry into rotation) or a withdrawal (out of rotation
// into withdrawn).
func (m *Monitor) budgets(v *view, old, nv Verdict, now time.Time) {
	in := v.in
	if in == nil || m.metrics.withdrawal == nil {
		return
	}
	switch {
	case nv.InRotation() && !old.InRotation() && !in.admittedBefore:
		in.admittedBefore = true
		class := "none"
		if in.Probe {
			class = "probe"
		}
		m.metrics.admission.WithLabelValues(class).Observe(sinceNanos(now, in.registeredAt).Seconds())
	case nv.State == apiv1.EligibilityWithdrawn && old.InRotation():
		if at, class := m.engine.withdrawalEvidence(in); !at.IsZero() {
			m.metrics.withdrawal.WithLabelValues(class).Observe(max(now.Sub(at), 0).Seconds())
		}
	}
}
