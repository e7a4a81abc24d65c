package health

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"

	"github.com/prometheus/client_golang/prometheus"
)

// histogram returns the sample count and sum of the histogram series of name with label value.
func histogram(t *testing.T, reg *prometheus.Registry, name, label string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// The budgets are measured from what the evidence says: an admission from the registration,
// a withdrawal from the first failure of the run that withdrew — the instant an unanswered
// probe was observed, not the later one its confirmation was reported at.
func TestBudgetsCountFromTheFirstEvidence(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := newTestMonitor(t, reg, nil)
	m.Register(Instance{ID: "a", Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	m.Register(Instance{ID: "b", Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	m.Observe(probeEv("a", ProbeOK, t0.Add(time.Second)))
	m.Observe(probeEv("a", ProbeOK, t0.Add(2500*time.Millisecond))) // admitted 2.5 s after registering
	// three unanswered probes observed from 10 s, reported when re-probes confirmed them at 12 s
	for i := range 3 {
		ev := probeEv("a", ProbeTimeout, t0.Add(12*time.Second))
		ev.Observed = t0.Add(10*time.Second + time.Duration(i)*100*time.Millisecond)
		m.Observe(ev)
	}
	m.Observe(Event{At: t0.Add(20 * time.Second), ID: "b", Kind: KindHeartbeat, Health: "failing"}) // at once
	for _, tt := range []struct {
		name, label string
		count       uint64
		sum         float64
	}{
		{"meshflows_admission_seconds", "probe", 1, 2.5},
		{"meshflows_admission_seconds", "none", 1, 0},
		{"meshflows_withdrawal_seconds", "probe", 1, 2},
		{"meshflows_withdrawal_seconds", "self_report", 1, 0},
	} {
		if n, sum := histogram(t, reg, tt.name, tt.label); n != tt.count || sum != tt.sum {
			t.Errorf("%s{%s}: %d samples summing %v, want %d summing %v", tt.name, tt.label, n, sum, tt.count, tt.sum)
		}
	}
	// back in rotation and out again: a second withdrawal is measured, a second admission is not
	for i := range 5 {
		m.Observe(probeEv("a", ProbeOK, t0.Add(time.Duration(30+i)*time.Second)))
	}
	m.Observe(probeEv("a", ProbeRefused, t0.Add(40*time.Second)))
	if n, _ := histogram(t, reg, "meshflows_admission_seconds", "probe"); n != 1 {
		t.Errorf("admissions measured %d, want 1: a return to rotation is no admission", n)
	}
	if n, sum := histogram(t, reg, "meshflows_withdrawal_seconds", "probe"); n != 2 || sum != 2 {
		t.Errorf("probe withdrawals %d summing %v, want 2 summing 2 (a refusal counts 0)", n, sum)
	}
	b := m.Budgets(t0.Add(41 * time.Second))
	if b.Withdrawals != 3 || b.WithdrawalP99Seconds != 2 || b.Admissions != 2 || b.AdmissionP99Seconds != 2.5 || len(b.Over()) != 0 {
		t.Errorf("budgets %+v, want 3 withdrawals at p99 2 s and 2 admissions at p99 2.5 s, none over", b)
	}
	if b := m.Budgets(t0.Add(41*time.Second + budgetWindow)); b.Withdrawals != 0 || b.Admissions != 0 {
		t.Errorf("a window later: %+v, want no sample left", b)
	}
	if _, err := reg.Gather(); err != nil { // every series well formed
		t.Error(err)
	}
}

// A flood of admissions queues; a withdrawal in the middle of it takes effect at once. The
// withdrawal's own cost is logged (measured, not asserted): it does not grow with the queue.
func TestAdmissionsQueueWithdrawalsDoNot(t *testing.T) {
	m, err := NewMonitor(MonitorConfig{Engine: Config{AdmitRate: 50}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%05d", i)
		m.Register(Instance{ID: ids[i], Zone: "z", Capabilities: []string{"c.x"}, Probe: true}, 1, t0)
	}
	for _, at := range []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second)} {
		for _, id := range ids {
			m.Observe(probeEv(id, ProbeOK, at))
		}
	}
	at := t0.Add(2 * time.Second)
	if v := m.engine.Verdict(ids[0], at); v.State != apiv1.EligibilitySlowStart {
		t.Fatalf("the first admitted: %+v", v)
	}
	if got := m.engine.AdmissionsQueued(); got != n-50 {
		t.Fatalf("%d queued, want %d: a burst of 50 admitted, the rest waiting", got, n-50)
	}
	start := time.Now()
	m.Observe(probeEv(ids[0], ProbeRefused, at))
	took := time.Since(start)
	if v := m.engine.Verdict(ids[0], at); v.State != apiv1.EligibilityWithdrawn {
		t.Errorf("withdrawn behind %d queued admissions? %+v", n-50, v)
	}
	t.Logf("a withdrawal with %d admissions queued: %v", n-50, took)
	// a second later, 50 more (oldest first): the 51st registered is in
	m.Advance(t0.Add(3 * time.Second))
	if v := m.engine.Verdict(ids[50], t0.Add(3*time.Second)); v.State != apiv1.EligibilitySlowStart {
		t.Errorf("the oldest waiting after a second: %+v", v)
	}
	if state, _, _ := m.Verdict(ids[50]); state != apiv1.EligibilitySlowStart {
		t.Errorf("the monitor publishes the admission from the queue: %s", state)
	}
	if v := m.engine.Verdict(ids[n-1], t0.Add(3*time.Second)); v.State != apiv1.EligibilityUnknown || !slices.Contains(v.Reasons, ReasonAdmissionQueued) {
		t.Errorf("the newest: %+v, want queued", v)
	}
}
