package health

import (
	"math"
	"slices"
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
	if in != nil && nv.State == apiv1.EligibilityWithdrawn && old.InRotation() && m.withdrawnAt.IsZero() {
		m.withdrawnAt = now // the next publication carries a withdrawal (OnWithdrawalPublished)
	}
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
		secs := sinceNanos(now, in.registeredAt).Seconds()
		m.metrics.admission.WithLabelValues(class).Observe(secs)
		m.admissions.add(now, secs)
	case nv.State == apiv1.EligibilityWithdrawn && old.InRotation():
		if at, class := m.engine.withdrawalEvidence(in); !at.IsZero() {
			secs := max(now.Sub(at), 0).Seconds()
			m.metrics.withdrawal.WithLabelValues(class).Observe(secs)
			m.withdrawals.add(now, secs)
		}
	}
}

// budgetWindow is how far back Budgets looks; budgetSamples bounds the samples it keeps of
// each budget (the newest).
const (
	budgetWindow  = 10 * time.Minute
	budgetSamples = 4096
)

// budgetLog keeps the recent samples of one budget, oldest first.
type budgetLog struct {
	at   []int64 // Unix nanoseconds
	secs []float64
}

func (l *budgetLog) add(now time.Time, secs float64) {
	if len(l.at) == budgetSamples {
		l.at, l.secs = l.at[1:], l.secs[1:]
	}
	l.at, l.secs = append(l.at, now.UnixNano()), append(l.secs, secs)
}

// p99 returns the samples of the window ending at now and their 99th percentile.
func (l *budgetLog) p99(now time.Time) (int, float64) {
	from := now.Add(-budgetWindow).UnixNano()
	i := 0
	for i < len(l.at) && l.at[i] < from {
		i++
	}
	l.at, l.secs = l.at[i:], l.secs[i:]
	if len(l.secs) == 0 {
		return 0, 0
	}
	s := slices.Clone(l.secs)
	slices.Sort(s)
	return len(s), s[min(len(s)-1, int(math.Ceil(0.99*float64(len(s))))-1)]
}

// Budgets returns the two budgets with what the last ten minutes measured.
func (m *Monitor) Budgets(now time.Time) apiv1.Budgets {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := apiv1.Budgets{WindowSeconds: int64(budgetWindow / time.Second),
		WithdrawalBudgetSeconds: WithdrawalBudget.Seconds(), AdmissionBudgetSeconds: AdmissionBudget.Seconds()}
	b.Withdrawals, b.WithdrawalP99Seconds = m.withdrawals.p99(now)
	b.Admissions, b.AdmissionP99Seconds = m.admissions.p99(now)
	return b
}
