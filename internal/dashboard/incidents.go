package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/routing"
)

// cellWidth is the width in pixels of one timeline slice.
const cellWidth = 3

// timelineCell is one slice of a capability's 24-hour strip.
type timelineCell struct {
	X     int
	Level string // ok, warming_up, partial, panic, none, or nodata
	Title string
	From  int64 // the slice's start (unix), for the drill-down
}

// timelineRow is one capability's strip.
type timelineRow struct {
	CapabilityID string
	Cells        []timelineCell
	Worst        string
}

type incidentsData struct {
	Incidents     []apiv1.Incident
	Unresolved    int
	BySeverity    map[string]int // open or acknowledged, by severity
	Timeline      []timelineRow
	Width         int
	BucketMinutes int64
	From, To      time.Time
}

// strips lays out the last 24 hours of each capability, one cell per bucket, slices the
// registry has no sample for marked nodata.
func strips(tl apiv1.TimelineResponse, now time.Time) ([]timelineRow, int, time.Time) {
	g, ok := newGrid(tl.BucketSeconds, now)
	if !ok {
		return nil, 0, now
	}
	var rows []timelineRow
	for _, c := range tl.Capabilities {
		byStart := make(map[time.Time]apiv1.TimelineBucket, len(c.Buckets))
		for _, b := range c.Buckets {
			byStart[b.Start.UTC()] = b
		}
		row := timelineRow{CapabilityID: c.CapabilityID, Worst: "ok"}
		for i := range g.n {
			start := g.start(i)
			cell := timelineCell{X: i * cellWidth, Level: "nodata", Title: start.Format("15:04") + " no data", From: start.Unix()}
			if b, ok := byStart[start]; ok {
				cell.Level = b.Level
				cell.Title = fmt.Sprintf("%s %s: %d instances, at least %d in rotation", start.Format("15:04"), b.Level, b.Instances, b.MinInRotation)
				row.Worst = worse(row.Worst, b.Level)
			}
			row.Cells = append(row.Cells, cell)
		}
		rows = append(rows, row)
	}
	return rows, g.width(), g.first
}

func (d *Dashboard) incidents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var errs []string
	data := &incidentsData{}
	list, err := d.registry.Incidents(ctx, "")
	if err != nil {
		errs = append(errs, errString("registry incidents", err)...)
	}
	data.Incidents = list.Incidents
	data.BySeverity = map[string]int{}
	for _, in := range list.Incidents {
		if in.Status == apiv1.IncidentOpen || in.Status == apiv1.IncidentAcknowledged {
			data.Unresolved++
			data.BySeverity[in.Severity]++
		}
	}
	tl, err := d.registry.Timeline(ctx)
	if err != nil {
		errs = append(errs, errString("registry timeline", err)...)
	}
	now := d.cfg.Now()
	data.Timeline, data.Width, data.From = strips(*tl, now)
	data.To, data.BucketMinutes = now.UTC(), tl.BucketSeconds/60
	d.render(w, r, "incidents", "Incidents", data, errs)
}

// incidentAction acknowledges, resolves or ignores an incident through the registry, with
// the form's comment.
func (d *Dashboard) incidentAction(w http.ResponseWriter, r *http.Request) {
	action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	if _, err := d.registry.IncidentAction(d.actingFor(r), r.PathValue("id"), action, strings.TrimSpace(r.PostFormValue("comment"))); err != nil {
		http.Error(w, action+": "+err.Error(), viewerStatus(err))
		return
	}
	http.Redirect(w, r, "/incidents#incident-"+r.PathValue("id"), http.StatusSeeOther)
}

// timelineExport downloads the registry's eligibility timeline as CSV.
func (d *Dashboard) timelineExport(w http.ResponseWriter, r *http.Request) {
	body, err := d.registry.TimelineCSV(r.Context())
	downloadCSV(w, "registry timeline", "meshflows-eligibility-timeline.csv", body, err)
}

// bulkAcknowledge acknowledges every incident ticked on the page.
func (d *Dashboard) bulkAcknowledge(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ids := r.PostForm["id"]
	if len(ids) == 0 {
		http.Error(w, "tick at least one incident", http.StatusBadRequest)
		return
	}
	if _, err := d.registry.AcknowledgeIncidents(d.actingFor(r), ids, strings.TrimSpace(r.PostFormValue("comment"))); err != nil {
		http.Error(w, "acknowledge: "+err.Error(), viewerStatus(err))
		return
	}
	http.Redirect(w, r, "/incidents", http.StatusSeeOther)
}

// incidentRunbook names the runbook of an incident's kind.
func incidentRunbook(in apiv1.Incident) string {
	switch in.Kind {
	case apiv1.IncidentQuarantine, apiv1.IncidentPanic, apiv1.IncidentSelfPreservation:
		return "/runbooks/eligibility"
	case apiv1.IncidentTrigger, apiv1.IncidentValidation:
		return "/runbooks/workflow-failing"
	case apiv1.IncidentRoute:
		return "/runbooks/route-unavailable"
	case apiv1.IncidentZoneOutlier:
		return "/runbooks/evacuate-a-zone"
	}
	return "/runbooks/incident-spike"
}

// Route availability thresholds of the Routes page's strips: at or above warnAvailability a
// slice is green, at or above critAvailability amber, below red.
const (
	warnAvailability = 0.95
	critAvailability = 0.90
)

// routesData is the Routes page: the gateway's table and each route's 24-hour strip.
type routesData struct {
	*routing.RoutesAnswer
	// Regions is the gateway's view of its regions (nil: a gateway without regions)
	Regions  *apiv1.GatewayRegions
	Health   map[string]routeStrip // by "METHOD pattern"
	Width    int
	From, To time.Time
}

// routeStrip is one route's 24 hours.
type routeStrip struct {
	Cells        []timelineCell
	Availability string
	Worst        string
	Requests     int64
}

// grid is the 24 hours of slices of one length that end with the slice holding now.
type grid struct {
	slice time.Duration
	n     int
	first time.Time
}

func newGrid(sliceSeconds int64, now time.Time) (grid, bool) {
	slice := time.Duration(sliceSeconds) * time.Second
	if slice <= 0 {
		return grid{}, false
	}
	n := int(24 * time.Hour / slice)
	return grid{slice: slice, n: n, first: now.Truncate(slice).Add(-time.Duration(n-1) * slice).UTC()}, true
}

// start returns the start of slice i.
func (g grid) start(i int) time.Time { return g.first.Add(time.Duration(i) * g.slice) }

// width is the strip's width in pixels.
func (g grid) width() int { return g.n * cellWidth }

// grade is a slice's level for a share of success: ok at or above warn, partial at or above
// crit, panic below.
func grade(share, warn, crit float64) string {
	switch {
	case share >= warn:
		return "ok"
	case share >= crit:
		return "partial"
	}
	return "panic"
}

// worse returns the worse of two levels of a strip.
func worse(a, b string) string {
	rank := map[string]int{"nodata": 0, "none": 0, "ok": 1, "warming_up": 2, "partial": 3, "panic": 4}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// routeStrips lays out each route's last 24 hours at the gateway, one cell per slice.
func routeStrips(h *apiv1.RouteHealthResponse, now time.Time) (map[string]routeStrip, int, time.Time) {
	g, ok := newGrid(h.SliceSeconds, now)
	if !ok {
		return nil, 0, now
	}
	out := make(map[string]routeStrip, len(h.Routes))
	for _, rt := range h.Routes {
		byStart := make(map[time.Time]apiv1.RouteHealthSlice, len(rt.Slices))
		for _, s := range rt.Slices {
			byStart[s.Start.UTC()] = s
		}
		st := routeStrip{Worst: "ok", Requests: rt.Requests, Availability: "—"}
		if rt.Requests > 0 {
			st.Availability = fmt.Sprintf("%.2f%%", 100*rt.Availability)
		}
		for i := range g.n {
			start := g.start(i)
			cell := timelineCell{X: i * cellWidth, Level: "nodata", Title: start.Format("15:04") + " no requests", From: start.Unix()}
			if s, ok := byStart[start]; ok {
				cell.Level = grade(s.Availability, warnAvailability, critAvailability)
				cell.Title = fmt.Sprintf("%s %.1f%% of %d requests answered (%d failed)", start.Format("15:04"), 100*s.Availability, s.Requests, s.Failed)
				st.Worst = worse(st.Worst, cell.Level)
			}
			st.Cells = append(st.Cells, cell)
		}
		out[rt.Route] = st
	}
	return out, g.width(), g.first
}

// triggerStrip is one workflow's 24 hours of runs.
type triggerStrip struct {
	Cells []triggerCell
	Worst string
}

// triggerCell is one slice, linking to its runs.
type triggerCell struct {
	timelineCell
}

// triggerStrips lays out each workflow's last 24 hours, one cell per slice, against the
// orchestrator's thresholds: green at or above the warning one, amber from the critical one,
// red below.
func triggerStrips(h *apiv1.TriggerHealthResponse, now time.Time) (map[string]triggerStrip, int, time.Time) {
	g, ok := newGrid(h.SliceSeconds, now)
	if !ok {
		return nil, 0, now
	}
	out := make(map[string]triggerStrip, len(h.Workflows))
	for _, wf := range h.Workflows {
		byStart := make(map[time.Time]apiv1.TriggerSlice, len(wf.Slices))
		for _, s := range wf.Slices {
			byStart[s.Start.UTC()] = s
		}
		st := triggerStrip{Worst: "ok"}
		for i := range g.n {
			start := g.start(i)
			cell := triggerCell{timelineCell: timelineCell{X: i * cellWidth, Level: "nodata", Title: start.Format("15:04") + " no runs", From: start.Unix()}}
			if s, ok := byStart[start]; ok {
				cell.Level = grade(s.SuccessRate, h.Warning, h.Critical)
				cell.Title = fmt.Sprintf("%s %d of %d runs succeeded (%.0f%%), p95 %.1f ms", start.Format("15:04"), s.Succeeded, s.Runs, 100*s.SuccessRate, s.P95MS)
				st.Worst = worse(st.Worst, cell.Level)
			}
			st.Cells = append(st.Cells, cell)
		}
		out[wf.Workflow] = st
	}
	return out, g.width(), g.first
}

// actingFor is r's context saying to the registry which viewer the console acts for: the
// registry judges an incident action by the viewer's identity (an admin, or the incident's
// owner), not the console's, and records the viewer (through the console).
func (d *Dashboard) actingFor(r *http.Request) context.Context {
	v := viewerOf(r)
	switch {
	case d.cfg.Insecure:
		return client.ActingFor(r.Context(), "console viewer", false)
	case v.all:
		return client.ActingFor(r.Context(), cmp.Or(v.identity, adminViewer), true)
	}
	return client.ActingFor(r.Context(), v.identity, false)
}

// viewerStatus is upstreamStatus for an action the registry judged by the viewer: its 403 is
// the viewer's, said as the registry said it.
func viewerStatus(err error) int {
	var ae *apiv1.Error
	if errors.As(err, &ae) && ae.Status == http.StatusForbidden {
		return http.StatusForbidden
	}
	return upstreamStatus(err)
}
