package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/routing"
)

// TestRouteStatSlices: counts land in the slice of their 5 minutes, a slice is reused a day
// later only after it is reset, and the answer leaves out slices older than 24 hours.
func TestRouteStatSlices(t *testing.T) {
	rh, err := newRouteHealth(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &routing.Entry{Route: routing.Route{Method: "GET", Pattern: "/x"}}
	rs := rh.keep([]*routing.Entry{e})["GET /x"]
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rs.record(t0, 200)
	rs.record(t0.Add(time.Minute), 502)
	rs.record(t0.Add(5*time.Minute), 200)
	tests := []struct {
		name      string
		at        time.Time
		wantSlice []int64 // requests per slice shown
		wantAvail float64
	}{
		{"both slices", t0.Add(6 * time.Minute), []int64{2, 1}, 2.0 / 3},
		{"a day later the first is gone", t0.Add(24*time.Hour + time.Minute), []int64{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ans := rh.answer(tt.at)
			var got []int64
			for _, s := range ans.Routes[0].Slices {
				got = append(got, s.Requests)
			}
			if len(got) != len(tt.wantSlice) || got[0] != tt.wantSlice[0] || ans.Routes[0].Availability != tt.wantAvail {
				t.Errorf("slices %v availability %v, want %v %v", got, ans.Routes[0].Availability, tt.wantSlice, tt.wantAvail)
			}
		})
	}
	// the slice of a day later is reset before it counts again
	rs.record(t0.Add(24*time.Hour+time.Minute), 200)
	ans := rh.answer(t0.Add(24*time.Hour + 2*time.Minute))
	if s := ans.Routes[0].Slices; len(s) != 2 || s[1].Requests != 1 || s[1].Failed != 0 { // 10:05 of the day before, and the reused 10:00
		t.Errorf("a reused slice: %+v", s)
	}
}

// BenchmarkRouteStatRecord is what route health adds to each proxied request.
func BenchmarkRouteStatRecord(b *testing.B) {
	rh, _ := newRouteHealth(prometheus.NewRegistry())
	rs := rh.keep([]*routing.Entry{{Route: routing.Route{Method: "GET", Pattern: "/x"}}})["GET /x"]
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rs.record(now, 200)
		}
	})
}

// TestReportTable: a route without an eligible upstream is reported after a minute, once,
// and cleared when it serves again; conflicts and rejected manifests are reported when new.
func TestReportTable(t *testing.T) {
	var sent []*apiv1.ReportRequest
	rep, _ := report.New(report.Config{Reporter: "gw", Send: func(_ context.Context, r *apiv1.ReportRequest) error { sent = append(sent, r); return nil }})
	g := &Gateway{cfg: Config{ID: "gw-1", Reporter: rep}}
	e := &routing.Entry{Route: routing.Route{Method: "POST", Pattern: "/orders", Source: "dynamic"}}
	// a table with one conflict (GET /orders won by orders@2.0.0 over orders@1.0.0) and one
	// rejected manifest (bad-1: PATH_NOT_AUTHORIZED)
	manifest := func(inst, svc, version string, gen int64) routing.ManifestInput {
		return routing.ManifestInput{InstanceID: inst, Generation: gen, Endpoint: "http://" + inst + ":80", Parsed: &apiv1.Manifest{FARP: "1.0",
			Service: apiv1.ManifestService{Name: svc, Version: version, Instance: inst}, Routes: []apiv1.ManifestRoute{{Path: "/orders", Methods: []string{"GET"}}}}}
	}
	table := routing.Derive(routing.Input{Policy: routing.Policy{"orders": {"/orders"}},
		Manifests: []routing.ManifestInput{manifest("o-1", "orders", "1.0.0", 1), manifest("o-2", "orders", "2.0.0", 2), manifest("bad-1", "bad", "1.0.0", 3)}})
	if len(table.Conflicts()) != 1 || len(table.Rejected()) != 1 {
		t.Fatalf("the table has %+v and %+v", table.Conflicts(), table.Rejected())
	}
	empty := &state{serving: map[*routing.Entry]*serving{e: {}}, table: table}
	g.state.Store(empty)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	flush := func() (events []string, conds []string) {
		sent = nil
		if err := rep.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, r := range sent {
			for _, e := range r.Events {
				events = append(events, e.Type+" "+e.Subject)
			}
			for _, c := range r.Conditions {
				conds = append(conds, fmt.Sprintf("%s %s %v", c.Kind, c.Subject, c.Active))
			}
		}
		return events, conds
	}
	steps := []struct {
		name       string
		at         time.Duration
		st         *state
		wantEvents []string
		wantConds  []string
	}{
		{"new conflict and rejection", 0, empty, []string{"route.conflict GET /orders", "route.rejected bad-1"}, nil},
		{"nothing new before a minute", 30 * time.Second, empty, nil, nil},
		{"a minute without upstream", 61 * time.Second, empty, []string{"route.no_upstream POST /orders"}, []string{"route POST /orders true"}},
		{"reported once", 90 * time.Second, empty, nil, nil},
		{"serving again clears it", 120 * time.Second, &state{serving: map[*routing.Entry]*serving{e: {upstreams: []upstream{{}}}}, table: table}, nil, []string{"route POST /orders false"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			g.state.Store(s.st)
			g.reportTable(t0.Add(s.at))
			events, conds := flush()
			if fmt.Sprint(events) != fmt.Sprint(s.wantEvents) || fmt.Sprint(conds) != fmt.Sprint(s.wantConds) {
				t.Errorf("events %v conditions %v, want %v %v", events, conds, s.wantEvents, s.wantConds)
			}
		})
	}
}
