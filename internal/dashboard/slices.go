package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// sliceData is one slice of a 24-hour strip, clicked: its figures, the journal's events of
// its window and the registry's series over it.
type sliceData struct {
	Kind, Name string // capability or route, and which
	From, To   time.Time
	Figures    []string
	Events     []eventRow
	LogsLink   string
	Charts     []metricChart
	// Aged: the slice is older than the registry's in-memory history.
	Aged bool
}

// slice answers /slice?capability=ID&from=UNIX or /slice?route=METHOD%20pattern&from=UNIX.
func (d *Dashboard) slice(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := r.URL.Query()
	from, err := strconv.ParseInt(v.Get("from"), 10, 64)
	if err != nil {
		http.Error(w, "from: the slice's start, a unix time", http.StatusBadRequest)
		return
	}
	data := sliceData{From: time.Unix(from, 0).UTC()}
	var errs []string
	q := apiv1.EventsQuery{Limit: 200}
	switch capID, route := v.Get("capability"), v.Get("route"); {
	case capID != "" && route == "":
		if !d.may(viewerOf(r), PermDiscover) {
			http.Error(w, "a capability's slice needs "+PermDiscover, http.StatusForbidden)
			return
		}
		data.Kind, data.Name, q.Subject = "capability", capID, capID
		tl, err := d.registry.Timeline(ctx)
		if err != nil {
			http.Error(w, "registry timeline: "+err.Error(), upstreamStatus(err))
			return
		}
		data.To = data.From.Add(time.Duration(tl.BucketSeconds) * time.Second)
		for _, c := range tl.Capabilities {
			for _, b := range c.Buckets {
				if c.CapabilityID == capID && b.Start.Equal(data.From) {
					data.Figures = append(data.Figures, fmt.Sprintf("level %s", b.Level), fmt.Sprintf("%d instances, at least %d in rotation", b.Instances, b.MinInRotation))
				}
			}
		}
	case route != "" && capID == "":
		if !d.may(viewerOf(r), PermGatewayAdmin) {
			http.Error(w, "a route's slice needs "+PermGatewayAdmin, http.StatusForbidden)
			return
		}
		data.Kind, data.Name, q.Text = "route", route, route
		h, err := d.gateway.GatewayRouteHealth(ctx)
		if err != nil {
			http.Error(w, "gateway route health: "+err.Error(), upstreamStatus(err))
			return
		}
		data.To = data.From.Add(time.Duration(h.SliceSeconds) * time.Second)
		for _, rt := range h.Routes {
			for _, s := range rt.Slices {
				if rt.Route == route && s.Start.Equal(data.From) {
					data.Figures = append(data.Figures, fmt.Sprintf("%d requests, %d failed", s.Requests, s.Failed), fmt.Sprintf("%.2f%% answered", 100*s.Availability))
				}
			}
		}
	default:
		http.Error(w, "name one capability or one route", http.StatusBadRequest)
		return
	}
	if len(data.Figures) == 0 {
		data.Figures = []string{"no data in this slice"}
	}
	q.From, q.Until = data.From, data.To
	if d.may(viewerOf(r), PermDiscover) {
		if ev, err := d.registry.Events(ctx, q); err != nil {
			errs = append(errs, errString("registry events", err)...)
		} else {
			data.Events = rows(ev.Events)
			slices.Reverse(data.Events)
		}
		lv := url.Values{"from": {data.From.Format(time.RFC3339)}, "until": {data.To.Format(time.RFC3339)}}
		if q.Subject != "" {
			lv.Set("subject", q.Subject)
		} else {
			lv.Set("q", q.Text)
		}
		data.LogsLink = "/logs?" + lv.Encode()
		if h, err := d.registry.MetricsHistory(ctx); err == nil {
			data.Charts = charts(h, data.From, data.To)
			data.Aged = d.cfg.Now().Sub(data.To) > time.Duration(h.WindowSeconds)*time.Second
		}
	}
	d.render(w, r, "slice", fmt.Sprintf("%s %s, %s to %s", data.Kind, data.Name, data.From.Format("15:04"), data.To.Format("15:04")), data, errs)
}

// compareData is several routes, or capabilities, on one chart over 24 hours.
type compareData struct {
	Kind  string
	Names []string
	Chart chart
	Unit  string
}

// compare draws the routes (?route=, repeated: their availability, %) or the capabilities
// (?capability=: the fewest instances in rotation) of the query on one chart, a point per
// slice with data.
func (d *Dashboard) compare(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := r.URL.Query()
	now := d.cfg.Now()
	var data compareData
	var series []apiv1.MetricSeries
	if len(v["route"]) > 6 || len(v["capability"]) > 6 {
		http.Error(w, "compare at most 6 at once", http.StatusBadRequest)
		return
	}
	switch routes, caps := v["route"], v["capability"]; {
	case len(routes) > 0 && len(caps) == 0:
		if !d.may(viewerOf(r), PermGatewayAdmin) {
			http.Error(w, "comparing routes needs "+PermGatewayAdmin, http.StatusForbidden)
			return
		}
		data.Kind, data.Names, data.Unit = "route", routes, "% answered"
		h, err := d.gateway.GatewayRouteHealth(ctx)
		if err != nil {
			http.Error(w, "gateway route health: "+err.Error(), upstreamStatus(err))
			return
		}
		for _, name := range routes {
			s := apiv1.MetricSeries{Name: name, Unit: data.Unit, Points: []apiv1.MetricPoint{}}
			for _, rt := range h.Routes {
				if rt.Route == name {
					for _, sl := range rt.Slices {
						s.Points = append(s.Points, apiv1.MetricPoint{Time: sl.Start, Value: 100 * sl.Availability})
					}
				}
			}
			series = append(series, s)
		}
	case len(caps) > 0 && len(routes) == 0:
		if !d.may(viewerOf(r), PermDiscover) {
			http.Error(w, "comparing capabilities needs "+PermDiscover, http.StatusForbidden)
			return
		}
		data.Kind, data.Names, data.Unit = "capability", caps, "instances in rotation (fewest in the slice)"
		tl, err := d.registry.Timeline(ctx)
		if err != nil {
			http.Error(w, "registry timeline: "+err.Error(), upstreamStatus(err))
			return
		}
		for _, name := range caps {
			s := apiv1.MetricSeries{Name: name, Unit: data.Unit, Points: []apiv1.MetricPoint{}}
			for _, c := range tl.Capabilities {
				if c.CapabilityID == name {
					for _, b := range c.Buckets {
						s.Points = append(s.Points, apiv1.MetricPoint{Time: b.Start, Value: float64(b.MinInRotation)})
					}
				}
			}
			series = append(series, s)
		}
	default:
		http.Error(w, "tick the routes, or the capabilities, to compare (not both)", http.StatusBadRequest)
		return
	}
	data.Chart = lineChart(series, now.Add(-24*time.Hour), now, 1000, 200)
	d.render(w, r, "compare", "Compare "+data.Kind+"s", data, nil)
}
