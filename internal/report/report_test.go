package report

import (
	"context"
	"errors"
	"fmt"
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
