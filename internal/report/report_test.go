package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type sink struct {
	mu   sync.Mutex
	down bool
	got  []*apiv1.ReportRequest
}

func (s *sink) send(_ context.Context, r *apiv1.ReportRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("registry away")
	}
	s.got = append(s.got, r)
	return nil
}

func ev(i int) apiv1.ReportedEvent {
	return apiv1.ReportedEvent{Type: apiv1.EventWorkflowRunFailed, Severity: apiv1.SeverityError, Subject: "w", Message: fmt.Sprint(i)}
}

func TestFlush(t *testing.T) {
	s := &sink{}
	r, err := New(Config{Reporter: "orc-1", Send: s.send, MaxQueue: 150})
	if err != nil {
		t.Fatal(err)
	}
	// the registry is away: nothing is lost up to the bound, the oldest go past it
	s.down = true
	for i := range 200 {
		r.Event(ev(i))
	}
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "w", Active: true})
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "w", Active: false}) // the latest state wins
	if err := r.Flush(context.Background()); err == nil {
		t.Fatal("a flush while the registry is away succeeded")
	}
	r.Event(ev(200))
	s.down = false
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	conds := 0
	for _, req := range s.got {
		if len(req.Events) > apiv1.MaxReportEvents || req.Reporter != "orc-1" {
			t.Errorf("a report of %d events from %q", len(req.Events), req.Reporter)
		}
		for _, e := range req.Events {
			msgs = append(msgs, e.Message)
		}
		for _, c := range req.Conditions {
			conds++
			if c.Active {
				t.Errorf("sent a stale condition state: %+v", c)
			}
		}
	}
	want := []string{}
	for i := 51; i <= 200; i++ { // 201 queued, 150 kept: the newest, in order
		want = append(want, fmt.Sprint(i))
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("events sent (-want +got):\n%s", diff)
	}
	if conds != 1 || len(s.got) != 2 {
		t.Errorf("%d conditions in %d reports, want 1 in 2", conds, len(s.got))
	}
	var nilR *Reporter
	nilR.Event(ev(0))
	nilR.Condition(apiv1.Condition{})
	if err := nilR.Flush(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestRaisedTriggersListTheWorkflows: a report that raises a trigger lists the workflows the
// orchestrator holds (the registry requires it); a raise for a workflow deleted since it was
// queued is dropped, not sent to be refused for ever; a clearing needs no list.
func TestRaisedTriggersListTheWorkflows(t *testing.T) {
	s := &sink{}
	r, err := New(Config{Reporter: "orc-1", Send: func(ctx context.Context, req *apiv1.ReportRequest) error {
		if err := req.Validate(); err != nil { // as the registry would
			return err
		}
		return s.send(ctx, req)
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetWorkflows(func() []string { return []string{"billing", "orders"} })
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "orders", Active: true})
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "deleted-since", Active: true})
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "gone", Active: false})
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentRoute, Subject: "GET /a", Active: true})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 1 {
		t.Fatalf("%d reports, want 1", len(s.got))
	}
	var got []string
	for _, c := range s.got[0].Conditions {
		got = append(got, fmt.Sprintf("%s %s %v", c.Kind, c.Subject, c.Active))
	}
	want := []string{"route GET /a true", "trigger gone false", "trigger orders true"}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"billing", "orders"}, s.got[0].Workflows); diff != "" {
		t.Errorf("workflows listed (-want +got):\n%s", diff)
	}
	// nothing raised: no list
	r.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: "orders", Active: false})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 2 || s.got[1].Workflows != nil {
		t.Errorf("a report that raises nothing listed %v", s.got[len(s.got)-1].Workflows)
	}
}
