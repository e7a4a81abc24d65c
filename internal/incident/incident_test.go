package incident_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newLog(t *testing.T, max int) (*incident.Log, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	l, err := incident.New(incident.Config{Max: max, Registerer: reg, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return l, reg
}

func statuses(l *incident.Log) []string {
	var out []string
	for _, in := range l.List("") {
		out = append(out, in.ID+":"+in.Kind+":"+in.Subject+":"+in.Status)
	}
	return out
}

func TestLifecycle(t *testing.T) {
	l, reg := newLog(t, 0)
	a := l.Raise(apiv1.IncidentPanic, "c.x/z1", "", "panic")
	if again := l.Raise(apiv1.IncidentPanic, "c.x/z1", "", "panic, still"); again.ID != a.ID || again.Occurrences != 2 {
		t.Fatalf("a standing condition raised again: %+v, want the same incident counted twice", again)
	}
	q := l.Raise(apiv1.IncidentQuarantine, "jms-1", "egress-jms", "flapping")
	want := `
# HELP meshflows_incidents_open Incidents not resolved (open or acknowledged), by kind.
# TYPE meshflows_incidents_open gauge
meshflows_incidents_open{kind="cohort_flapping"} 0
meshflows_incidents_open{kind="panic"} 1
meshflows_incidents_open{kind="quarantine"} 1
meshflows_incidents_open{kind="route"} 0
meshflows_incidents_open{kind="self_preservation"} 0
meshflows_incidents_open{kind="trigger"} 0
meshflows_incidents_open{kind="validation"} 0
meshflows_incidents_open{kind="zone_outlier"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshflows_incidents_open"); err != nil {
		t.Error(err)
	}
	ack, err := l.Acknowledge(q.ID, "oncall")
	if err != nil || ack.Status != apiv1.IncidentAcknowledged || ack.AcknowledgedBy != "oncall" {
		t.Fatalf("acknowledge: %+v %v", ack, err)
	}
	l.Clear(apiv1.IncidentPanic, "c.x/z1")
	res, _ := l.Get(a.ID)
	if res.Status != apiv1.IncidentResolved || res.ResolvedBy != incident.ResolvedBySystem {
		t.Errorf("a cleared condition: %+v, want resolved by the system", res)
	}
	if again := l.Raise(apiv1.IncidentPanic, "c.x/z1", "", "panic again"); again.ID == a.ID {
		t.Error("a condition that returns after resolution reused the resolved incident")
	}
	if _, err := l.Resolve(q.ID, "oncall"); err != nil {
		t.Fatal(err)
	}
	wantList := []string{"3:panic:c.x/z1:open", "2:quarantine:jms-1:resolved", "1:panic:c.x/z1:resolved"}
	if diff := cmp.Diff(wantList, statuses(l)); diff != "" {
		t.Errorf("incidents newest first (-want +got):\n%s", diff)
	}
	if got := l.List("unresolved"); len(got) != 1 || got[0].ID != "3" {
		t.Errorf("unresolved: %+v", got)
	}
	if _, err := l.Acknowledge("99", "x"); !errors.Is(err, incident.ErrNotFound) {
		t.Errorf("unknown incident: %v", err)
	}
}

func TestBoundedKeepsUnresolved(t *testing.T) {
	l, _ := newLog(t, 2)
	a := l.Raise(apiv1.IncidentPanic, "a/z", "", "")
	l.Clear(apiv1.IncidentPanic, "a/z")
	l.Raise(apiv1.IncidentPanic, "b/z", "", "")
	l.Raise(apiv1.IncidentPanic, "c/z", "", "")
	if _, err := l.Get(a.ID); err == nil {
		t.Error("past the bound the oldest resolved incident is still kept")
	}
	if got := len(l.List("")); got != 2 {
		t.Errorf("%d incidents kept, bound is 2", got)
	}
}

// TestFromTransitions drives a real monitor: an instance that flaps is quarantined and an
// incident raised for its owner; the group's panic raises and clears one too.
func TestFromTransitions(t *testing.T) {
	l, _ := newLog(t, 0)
	m, err := health.NewMonitor(health.MonitorConfig{OnTransition: incident.FromTransitions(l, func(id string) string { return "owner-of-" + id })})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		m.Register(health.Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	}
	at := t0
	for range 3 { // flap_limit withdrawals within the flap window
		at = at.Add(10 * time.Second)
		m.Observe(health.Event{At: at, ID: "a", Kind: health.KindHeartbeat, Health: "failing"})
		at = at.Add(10 * time.Second)
		m.Observe(health.Event{At: at, ID: "a", Kind: health.KindHeartbeat, Health: "ok"})
	}
	got := l.List(apiv1.IncidentOpen)
	if len(got) != 1 || got[0].Kind != apiv1.IncidentQuarantine || got[0].Owner != "owner-of-a" || !strings.Contains(got[0].Summary, "flapping") {
		t.Fatalf("after three withdrawals in ten minutes: %+v, want one quarantine incident for a's owner", got)
	}
	m.Observe(health.Event{At: at.Add(time.Second), ID: "b", Kind: health.KindHeartbeat, Health: "failing"})
	var fleet health.Members
	for _, id := range []string{"a", "b", "c"} {
		fleet = append(fleet, health.Member{Instance: health.Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, Generation: 1,
			RegisteredAt: t0, LastRenewal: at, Health: map[bool]string{true: "failing", false: "ok"}[id == "b"]})
	}
	m.Sync(at.Add(30*time.Second), fleet)
	if got := l.List(apiv1.IncidentOpen); len(got) != 1 {
		t.Fatalf("panic for 30 s: %+v, want no panic incident yet (a minute is expected, at a start)", got)
	}
	m.Sync(at.Add(62*time.Second), fleet)
	if got := l.List(apiv1.IncidentOpen); len(got) != 2 || got[0].Kind != apiv1.IncidentPanic || got[0].Subject != "c.x/z" {
		t.Fatalf("1 of 3 in rotation for a minute: %+v, want a panic incident for c.x/z", got)
	}
	m.Observe(health.Event{At: at.Add(63 * time.Second), ID: "b", Kind: health.KindHeartbeat, Health: "ok"})
	if got := l.List(apiv1.IncidentOpen); len(got) != 1 {
		t.Errorf("panic over: %+v, want only the quarantine open", got)
	}
}

// A whole cohort flapping together raises one critical cohort_flapping incident, quarantines
// nobody, and resolves once a flap window passes with nobody leaving rotation.
func TestCohortFlappingIsOneIncident(t *testing.T) {
	l, _ := newLog(t, 0)
	m, err := health.NewMonitor(health.MonitorConfig{OnTransition: incident.FromTransitions(l, func(string) string { return "" }),
		Engine: health.Config{FlapWindow: 2 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	var fleet health.Members
	for _, id := range ids {
		m.Register(health.Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
		fleet = append(fleet, health.Member{Instance: health.Instance{ID: id, Zone: "z", Capabilities: []string{"c.x"}}, Generation: 1, RegisteredAt: t0})
	}
	at := t0
	for range 3 {
		for _, h := range []string{"failing", "ok"} {
			at = at.Add(10 * time.Second)
			for _, id := range ids {
				m.Observe(health.Event{At: at, ID: id, Kind: health.KindHeartbeat, Health: h})
			}
		}
	}
	got := l.List(apiv1.IncidentOpen)
	if len(got) != 1 || got[0].Kind != apiv1.IncidentCohortFlapping || got[0].Subject != "c.x/z" || got[0].Severity != apiv1.IncidentCritical {
		t.Fatalf("the cohort flapping together: %+v, want one critical cohort_flapping incident for c.x/z and no quarantine", got)
	}
	for i := range fleet {
		fleet[i].LastRenewal, fleet[i].Health = at.Add(3*time.Minute), "ok"
	}
	m.Sync(at.Add(3*time.Minute), fleet) // a quiet flap window later
	if got := l.List(apiv1.IncidentOpen); len(got) != 0 {
		t.Errorf("a flap window without a withdrawal: %+v, want it resolved", got)
	}
}

func TestActions(t *testing.T) {
	j := journal.New(0, func() time.Time { return t0 })
	reg := prometheus.NewPedanticRegistry()
	l, err := incident.New(incident.Config{Registerer: reg, Now: func() time.Time { return t0 }, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	q := l.Raise(apiv1.IncidentQuarantine, "jms-1", "egress-jms", "flapping")
	p := l.Raise(apiv1.IncidentPanic, "c.x/z1", "", "panic")
	if q.Severity != apiv1.IncidentWarning || p.Severity != apiv1.IncidentCritical {
		t.Errorf("severities %q %q, want warning and critical", q.Severity, p.Severity)
	}
	tests := []struct {
		name, id, action, comment string
		wantStatus                string
		wantActions               int
		wantErr                   error
	}{
		{"acknowledge with a comment", q.ID, apiv1.IncidentActionAcknowledge, "looking at the broker", apiv1.IncidentAcknowledged, 1, nil},
		{"a no-op without a comment is not kept", q.ID, apiv1.IncidentActionAcknowledge, "", apiv1.IncidentAcknowledged, 1, nil},
		{"a no-op with a comment is kept", q.ID, apiv1.IncidentActionAcknowledge, "still on it", apiv1.IncidentAcknowledged, 2, nil},
		{"ignore", p.ID, apiv1.IncidentActionIgnore, "zone z1 is being decommissioned", apiv1.IncidentIgnored, 1, nil},
		{"unknown action", p.ID, "delete", "", "", 0, incident.ErrBadAction},
		{"comment too long", p.ID, apiv1.IncidentActionResolve, strings.Repeat("x", incident.MaxComment+1), "", 0, incident.ErrBadAction},
		{"unknown incident", "99", apiv1.IncidentActionResolve, "", "", 0, incident.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := l.Act(tt.id, tt.action, "oncall@example", tt.comment)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if in.Status != tt.wantStatus || len(in.Actions) != tt.wantActions {
				t.Errorf("status %q with %d actions, want %q with %d", in.Status, len(in.Actions), tt.wantStatus, tt.wantActions)
			}
		})
	}
	// An ignored incident does not page again: its condition returning counts an occurrence.
	if again := l.Raise(apiv1.IncidentPanic, "c.x/z1", "", "panic, still"); again.ID != p.ID || again.Status != apiv1.IncidentIgnored {
		t.Errorf("an ignored condition raised again: %+v", again)
	}
	want := `
# HELP meshflows_incidents_open Incidents not resolved (open or acknowledged), by kind.
# TYPE meshflows_incidents_open gauge
meshflows_incidents_open{kind="cohort_flapping"} 0
meshflows_incidents_open{kind="panic"} 0
meshflows_incidents_open{kind="quarantine"} 1
meshflows_incidents_open{kind="route"} 0
meshflows_incidents_open{kind="self_preservation"} 0
meshflows_incidents_open{kind="trigger"} 0
meshflows_incidents_open{kind="validation"} 0
meshflows_incidents_open{kind="zone_outlier"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshflows_incidents_open"); err != nil {
		t.Error(err)
	}
	l.Clear(apiv1.IncidentPanic, "c.x/z1") // an ignored incident resolves when its condition ends, and counts nothing twice
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshflows_incidents_open"); err != nil {
		t.Error(err)
	}
	events, _ := j.Find(journal.Query{Subject: "incident/*"})
	var got []string
	for _, e := range events {
		got = append(got, e.Type+" "+e.Severity+" "+e.Message)
	}
	wantEvents := []string{
		"incident.opened warning incident 1 opened (quarantine, warning): flapping",
		"incident.opened error incident 2 opened (panic, critical): panic",
		"incident.acknowledged info incident 1 (quarantine jms-1): acknowledged by oncall@example: looking at the broker",
		"incident.acknowledged info incident 1 (quarantine jms-1): acknowledged by oncall@example: still on it",
		"incident.ignored info incident 2 (panic c.x/z1): ignored by oncall@example: zone z1 is being decommissioned",
		"incident.resolved info incident 2 resolved: its condition ended (panic c.x/z1)",
	}
	if diff := cmp.Diff(wantEvents, got); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
}
