package server_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

func journalServer(t testing.TB) (*registrytest.Server, *journal.Journal) {
	t.Helper()
	var s *registrytest.Server
	j := journal.New(0, func() time.Time { return s.Clock.Now() }) // the events on the registry's clock
	s = registrytest.NewServerWith(t, registry.Config{Journal: j}, server.Config{Journal: j}, registrytest.Epoch0)
	return s, j
}

func events(t *testing.T, base, query string) apiv1.EventsResponse {
	t.Helper()
	r := do(t, "GET", base+"/v1/events?"+query, "")
	if r.status != 200 {
		t.Fatalf("GET /v1/events?%s: %d %s", query, r.status, r.body)
	}
	var out apiv1.EventsResponse
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func eventLines(es []apiv1.Event) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d %s %s %s", e.Seq, e.Type, e.Severity, e.Subject))
	}
	return out
}

// The registry's own changes land in the journal, and GET /v1/events filters them.
func TestEventsEndpoint(t *testing.T) {
	s, _ := journalServer(t)
	body := func(id string) string { return strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", id) }
	register(t, s, body("jms-a"))
	register(t, s, body("jms-b"))
	reg := register(t, s, body("jms-a")) // a new incarnation
	if r := do(t, "DELETE", s.URL+"/v1/services/jms-a?generation="+itoa(reg.Generation), ""); r.status != 204 {
		t.Fatalf("deregister: %d %s", r.status, r.body)
	}
	s.Clock.Advance(registry.DefaultLeaseTTL + time.Second)
	if _, err := s.Registry.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	expiredAt := url.QueryEscape(s.Clock.Now().UTC().Format(time.RFC3339)) // the sweep's second; the rest came a lease earlier
	tests := []struct {
		query string
		want  []string
	}{
		{"from=" + expiredAt, []string{"5 instance.expired warning jms-b"}},
		{"until=" + expiredAt + "&subject=jms-*", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b", "3 instance.reregistered info jms-a",
			"4 instance.deregistered info jms-a"}},
		{"since=0&from=" + expiredAt, []string{"5 instance.expired warning jms-b"}},
		{"", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b", "3 instance.reregistered info jms-a",
			"4 instance.deregistered info jms-a", "5 instance.expired warning jms-b"}},
		{"subject=jms-a", []string{"1 instance.registered info jms-a", "3 instance.reregistered info jms-a", "4 instance.deregistered info jms-a"}},
		{"subject=jms-*&severity=warning", []string{"5 instance.expired warning jms-b"}},
		{"type=instance.registered,instance.deregistered", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b", "4 instance.deregistered info jms-a"}},
		{"type=instance.registered&type=instance.expired", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b", "5 instance.expired warning jms-b"}},
		{"q=" + url.QueryEscape("GENERATION 3 REPLACES 1"), []string{"3 instance.reregistered info jms-a"}},
		{"q=" + url.QueryEscape("jms-(a|b)"), []string{}},
		{"since=3", []string{"4 instance.deregistered info jms-a", "5 instance.expired warning jms-b"}},
		{"since=99", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b", "3 instance.reregistered info jms-a",
			"4 instance.deregistered info jms-a", "5 instance.expired warning jms-b"}},
		{"limit=2", []string{"4 instance.deregistered info jms-a", "5 instance.expired warning jms-b"}},
		{"since=0&limit=2", []string{"1 instance.registered info jms-a", "2 instance.registered info jms-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got := events(t, s.URL, tt.query)
			if diff := cmp.Diff(tt.want, eventLines(got.Events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	re := events(t, s.URL, "type=instance.reregistered").Events[0]
	if re.Attrs["reason"] == nil || re.Attrs["previous_generation"] != float64(1) {
		t.Errorf("a re-registration says why and what it replaced: %+v", re)
	}
}

func TestEventsBadInput(t *testing.T) {
	s, _ := journalServer(t)
	tests := []struct {
		query, wantPath string
	}{
		{"since=-1", "since"},
		{"since=abc", "since"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=99999999999999999999", "limit"},
		{"type=instance.exploded", "type"},
		{"severity=fatal", "severity"},
		{"q=" + strings.Repeat("x", 201), "q"},
		{"subject=" + strings.Repeat("x", 301), "subject"},
		{"wait=soon&since=0", "wait"},
		{"wait=30s", "wait"},
		{"format=xml", "format"},
		{"sinse=3", "sinse"},
		{"from=yesterday", "from"},
		{"until=2026-12-04", "until"},
		{"from=2026-12-04T10:00:00Z&until=2026-12-04T09:00:00Z", "until"},
	}
	for _, tt := range tests {
		t.Run(tt.query[:min(len(tt.query), 30)], func(t *testing.T) {
			r := do(t, "GET", s.URL+"/v1/events?"+tt.query, "")
			if r.status != 400 {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			e := apiErr(t, r)
			if len(e.Details) == 0 || e.Details[0].Path != tt.wantPath {
				t.Errorf("details %+v, want one on %q", e.Details, tt.wantPath)
			}
		})
	}
}

func TestEventsLongPoll(t *testing.T) {
	s, j := journalServer(t)
	j.Record(apiv1.EventSnapshot, "", "registry", "old news", nil)
	got := make(chan apiv1.EventsResponse, 1)
	go func() {
		resp, err := http.Get(s.URL + "/v1/events?since=1&subject=jms-late&wait=5m")
		if err != nil {
			got <- apiv1.EventsResponse{}
			return
		}
		defer resp.Body.Close()
		var out apiv1.EventsResponse
		json.NewDecoder(resp.Body).Decode(&out)
		got <- out
	}()
	register(t, s, strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", "jms-other")) // no match: the poll goes on
	register(t, s, strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", "jms-late"))
	r := <-got
	if diff := cmp.Diff([]string{"3 instance.registered info jms-late"}, eventLines(r.Events)); diff != "" || r.Next != 3 {
		t.Errorf("long poll (-want +got):\n%s next %d", diff, r.Next)
	}
	// A poll that nothing answers ends with its wait, empty, and says where to go on from.
	r = events(t, s.URL, "since=3&wait=20ms")
	if len(r.Events) != 0 || r.Next != 3 {
		t.Errorf("an empty long poll: %+v", r)
	}
}

func TestEventsCSV(t *testing.T) {
	s, j := journalServer(t)
	j.Record(apiv1.EventRegistered, "", "=cmd|' /C calc'!A0", "@SUM(A1)", nil)
	j.Record(apiv1.EventDeregistered, "", "plain", "plain", nil)
	r := do(t, "GET", s.URL+"/v1/events?format=csv&type=instance.registered", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	rows, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0][0] != "seq" || rows[1][4] != "'=cmd|' /C calc'!A0" || rows[1][5] != "'@SUM(A1)" {
		t.Errorf("csv rows = %q, want the header and the one registration, defused", rows)
	}
}

func TestEventsWithoutJournal(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	if r := do(t, "GET", s.URL+"/v1/events", ""); r.status != 501 {
		t.Errorf("no journal: %d, want 501", r.status)
	}
}

// BenchmarkEventsFirstPage is the console's first page: the newest 100 events of a text
// filter over a full journal of 50,000 (budget: 100 ms server time).
func BenchmarkEventsFirstPage(b *testing.B) {
	s, j := journalServer(b)
	for i := range journal.DefaultMax {
		j.Record(apiv1.EventEligibility, "", fmt.Sprintf("instance-%05d", i), fmt.Sprintf("instance-%05d serving -> degraded: heartbeat says degraded", i), nil)
	}
	h := s.Config.Handler
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/events?q=instance-1&severity=info", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}

// Reports from gateways and orchestrators land in the journal, with who reported them, and
// their conditions raise and clear incidents.
func TestReports(t *testing.T) {
	j := journal.New(0, nil)
	incidents, err := incident.New(incident.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.NewServerWith(t, registry.Config{Journal: j}, server.Config{Journal: j, Incidents: incidents}, registrytest.Epoch0)
	body := `{"reporter":"orchestrator@127.0.0.1:7401","events":[{"type":"workflow.run_failed","severity":"error","subject":"order-publish","message":"run r-1 failed","attrs":{"run_id":"r-1"}}],
		"conditions":[{"kind":"trigger","subject":"order-publish","active":true,"summary":"0% of 3 runs succeeded","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}],
		"workflows":["billing","order-publish"]}`
	r := do(t, "POST", s.URL+"/v1/reports", body)
	if r.status != 200 || !strings.Contains(string(r.body), `"recorded":1`) {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	got := events(t, s.URL, "subject=order-publish").Events
	if len(got) != 1 || got[0].Attrs["reporter"] != "orchestrator@127.0.0.1:7401" || got[0].Attrs["run_id"] != "r-1" {
		t.Errorf("reported event: %+v", got)
	}
	open := incidents.List("unresolved")
	if len(open) != 1 || open[0].Kind != apiv1.IncidentTrigger || open[0].Severity != apiv1.IncidentCritical || open[0].Subject != "order-publish" ||
		open[0].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trigger incident: %+v", open)
	}
	do(t, "POST", s.URL+"/v1/reports", `{"reporter":"o","conditions":[{"kind":"trigger","subject":"order-publish","active":false}]}`)
	if open := incidents.List("unresolved"); len(open) != 0 {
		t.Errorf("a cleared condition left %+v", open)
	}
	// a trigger raised for a workflow the reporting orchestrator does not hold opens nothing
	for _, bad := range []string{
		`{"reporter":"o","conditions":[{"kind":"trigger","subject":"no-such-workflow","active":true}],"workflows":["order-publish"]}`,
		`{"reporter":"o","conditions":[{"kind":"trigger","subject":"order-publish","active":true}]}`,
	} {
		r := do(t, "POST", s.URL+"/v1/reports", bad)
		if r.status != 400 || !strings.Contains(string(r.body), `"conditions[0].subject"`) || !strings.Contains(string(r.body), "workflows") {
			t.Errorf("%s: %d %s, want 400 naming conditions[0].subject", bad, r.status, r.body)
		}
	}
	if open := incidents.List("unresolved"); len(open) != 0 {
		t.Errorf("a refused report opened %+v", open)
	}
	for _, bad := range []string{
		`{"reporter":"o","workflows":[""]}`,
		`{"reporter":"o","events":[{"type":"instance.registered","severity":"info","subject":"x","message":"forged"}]}`,
		`{"reporter":"o","conditions":[{"kind":"quarantine","subject":"x","active":true}]}`,
		`{"events":[]}`,
		`{"reporter":"o","events":[{"type":"route.conflict","severity":"fatal","subject":"","message":""}]}`,
	} {
		if r := do(t, "POST", s.URL+"/v1/reports", bad); r.status != 400 {
			t.Errorf("%s: %d, want 400", bad, r.status)
		}
	}
}

type fixedHistory apiv1.MetricsHistory

func (h *fixedHistory) Snapshot() *apiv1.MetricsHistory { return (*apiv1.MetricsHistory)(h) }

// GET /v1/metrics/history answers the history it is given, 501 without one, and refuses a
// parameter (it takes none).
func TestMetricsHistoryEndpoint(t *testing.T) {
	want := &fixedHistory{IntervalSeconds: 10, WindowSeconds: 3600, Series: []apiv1.MetricSeries{{Name: "active_instances", Unit: "instances",
		Points: []apiv1.MetricPoint{{Time: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC), Value: 3}}}}}
	s := registrytest.NewServerWith(t, registry.Config{}, server.Config{History: want}, registrytest.Epoch0)
	r := do(t, "GET", s.URL+apiv1.PathMetricsHistory, "")
	var got apiv1.MetricsHistory
	if err := json.Unmarshal(r.body, &got); r.status != 200 || err != nil {
		t.Fatalf("%d %v %s", r.status, err, r.body)
	}
	if diff := cmp.Diff((*apiv1.MetricsHistory)(want), &got); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if r := do(t, "GET", s.URL+apiv1.PathMetricsHistory+"?window=1h", ""); r.status != 400 {
		t.Errorf("an unknown parameter: %d %s", r.status, r.body)
	}
	none := registrytest.NewServerWith(t, registry.Config{}, server.Config{}, registrytest.Epoch0)
	if r := do(t, "GET", none.URL+apiv1.PathMetricsHistory, ""); r.status != 501 {
		t.Errorf("without a history: %d %s", r.status, r.body)
	}
}
