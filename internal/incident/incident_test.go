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
meshflows_incidents_open{kind="panic"} 1
meshflows_incidents_open{kind="quarantine"} 1
meshflows_incidents_open{kind="self_preservation"} 0
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
