package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/dashboard"
)

// TestRunsAndEventsLinkTheirTraces: with --trace-url-template a run's page links its trace,
// and so does an event that names one (a failed run's); without it, nothing links; a
// template that is no http(s) URL with {trace_id} is refused.
func TestRunsAndEventsLinkTheirTraces(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/workflows/order-batch/runs/run-1":
			json.NewEncoder(w).Encode(apiv1.Run{RunID: "run-1", Workflow: "order-batch", Trigger: "http", Status: apiv1.RunFailed, TraceID: id})
		case "/v1/incidents":
			json.NewEncoder(w).Encode(apiv1.IncidentsResponse{Incidents: []apiv1.Incident{{ID: "1", Kind: apiv1.IncidentTrigger, Subject: "order-batch",
				Summary: "below its critical success rate", Severity: apiv1.IncidentCritical, Status: apiv1.IncidentOpen, OpenedAt: time.Now(), Occurrences: 1, TraceID: id}}})
		case "/v1/eligibility/timeline":
			json.NewEncoder(w).Encode(apiv1.TimelineResponse{})
		case "/v1/events":
			json.NewEncoder(w).Encode(apiv1.EventsResponse{Events: []apiv1.Event{{Seq: 1, Time: time.Now(), Type: apiv1.EventWorkflowRunFailed,
				Severity: apiv1.SeverityError, Subject: "order-batch", Message: "run run-1 failed", Attrs: map[string]any{"run_id": "run-1", "trace_id": id}}}, Next: 1})
		default:
			http.NotFound(w, r)
		}
	}))
	defer upstream.Close()
	get := func(cfg dashboard.Config, path string) string {
		cfg.Insecure, cfg.OrchestratorURL, cfg.RegistryURL = true, upstream.URL, upstream.URL
		d, err := dashboard.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(d.Handler())
		defer srv.Close()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	link := `href="https://tempo.example/trace/` + id + `"`
	on := dashboard.Config{TraceURLTemplate: "https://tempo.example/trace/{trace_id}"}
	if p := get(on, "/workflows/order-batch/runs/run-1"); !strings.Contains(p, `id="run-trace" `+link) {
		t.Errorf("the run's page does not link its trace:\n%.3000s", p)
	}
	if p := get(on, "/events"); !strings.Contains(p, `class="trace" `+link) {
		t.Errorf("the events page does not link the failed run's trace:\n%.3000s", p)
	}
	if p := get(on, "/incidents"); !strings.Contains(p, link+` class="trace-link"`) {
		t.Errorf("the incidents page does not link the trigger incident's trace:\n%.3000s", p)
	}
	if p := get(dashboard.Config{}, "/workflows/order-batch/runs/run-1"); strings.Contains(p, "tempo.example") || strings.Contains(p, `id="run-trace"`) {
		t.Errorf("a trace link without a template")
	}
	for _, bad := range []string{"https://tempo.example/trace/", "javascript:alert('{trace_id}')", "/trace/{trace_id}"} {
		if _, err := dashboard.New(dashboard.Config{Insecure: true, TraceURLTemplate: bad}); err == nil {
			t.Errorf("template %q accepted", bad)
		}
	}
}
