package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/routing"
)

// Route health: per route, the requests it answered and those that failed (a 5xx, a
// connection failure, no eligible upstream) in 5-minute slices over 24 hours, and the series
// meshflows_gateway_route_requests_total{route, code_class}. Both hold the routes of the
// current table only: a route that leaves the table leaves them (the cardinality bound is
// the table's size times the four code classes).
const (
	healthSlice  = 5 * time.Minute
	healthSlices = int(24 * time.Hour / healthSlice)
)

// codeClasses are the code_class label's values.
var codeClasses = [4]string{"2xx", "3xx", "4xx", "5xx"}

// slice is one 5-minute slice of a route's requests. Counting is lock-free; the slice is
// reset by the first request of a new period (a request racing that reset may be lost, which
// a statistic can bear).
type slice struct {
	period atomic.Int64 // unix time / healthSlice of the period the counts belong to
	total  atomic.Int64
	failed atomic.Int64
}

// routeStat counts one route's requests.
type routeStat struct {
	name    string
	classes [4]prometheus.Counter
	slices  [healthSlices]slice
}

// record counts one answer of status code at now.
func (rs *routeStat) record(now time.Time, code int) {
	if rs == nil {
		return
	}
	if c := code/100 - 2; c >= 0 && c < len(rs.classes) && rs.classes[c] != nil {
		rs.classes[c].Inc()
	}
	p := now.Unix() / int64(healthSlice/time.Second)
	s := &rs.slices[p%int64(healthSlices)]
	if old := s.period.Load(); old != p && s.period.CompareAndSwap(old, p) {
		s.total.Store(0)
		s.failed.Store(0)
	}
	s.total.Add(1)
	if code >= 500 {
		s.failed.Add(1)
	}
}

// routeHealth holds the stats of the current table's routes.
type routeHealth struct {
	requests *prometheus.CounterVec // nil without a registerer

	mu    sync.Mutex
	stats map[string]*routeStat
}

func newRouteHealth(reg prometheus.Registerer) (*routeHealth, error) {
	rh := &routeHealth{stats: map[string]*routeStat{}}
	if reg != nil {
		rh.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "meshflows", Subsystem: "gateway", Name: "route_requests_total",
			Help: "Requests answered per route of the table (METHOD pattern) and status class; a 5xx includes connection failures and routes without an eligible upstream. Only the current table's routes have series."},
			[]string{"route", "code_class"})
		if err := reg.Register(rh.requests); err != nil {
			return nil, err
		}
	}
	return rh, nil
}

// routeName is a route's label value.
func routeName(e *routing.Entry) string { return e.Method + " " + e.Pattern }

// keep makes the stats of the table's routes, keeps those it already has and drops (with
// their series) those of routes the table no longer has.
func (rh *routeHealth) keep(entries []*routing.Entry) map[string]*routeStat {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	next := make(map[string]*routeStat, len(entries))
	for _, e := range entries {
		name := routeName(e)
		rs := rh.stats[name]
		if rs == nil {
			rs = &routeStat{name: name}
			if rh.requests != nil {
				for i, c := range codeClasses {
					rs.classes[i] = rh.requests.WithLabelValues(name, c)
				}
			}
		}
		next[name] = rs
	}
	for name := range rh.stats {
		if _, ok := next[name]; !ok && rh.requests != nil {
			for _, c := range codeClasses {
				rh.requests.DeleteLabelValues(name, c)
			}
		}
	}
	rh.stats = next
	return next
}

// answer is the last 24 hours of every route, oldest slice first, slices without requests
// left out.
func (rh *routeHealth) answer(now time.Time) apiv1.RouteHealthResponse {
	rh.mu.Lock()
	stats := make([]*routeStat, 0, len(rh.stats))
	for _, rs := range rh.stats {
		stats = append(stats, rs)
	}
	rh.mu.Unlock()
	slices.SortFunc(stats, func(a, b *routeStat) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	sec := int64(healthSlice / time.Second)
	last := now.Unix() / sec
	out := apiv1.RouteHealthResponse{SliceSeconds: sec, Routes: make([]apiv1.RouteHealth, 0, len(stats))}
	for _, rs := range stats {
		h := apiv1.RouteHealth{Route: rs.name, Slices: []apiv1.RouteHealthSlice{}}
		for p := last - int64(healthSlices) + 1; p <= last; p++ {
			s := &rs.slices[p%int64(healthSlices)]
			if s.period.Load() != p {
				continue
			}
			total, failed := s.total.Load(), s.failed.Load()
			if total == 0 {
				continue
			}
			h.Requests += total
			h.Failed += failed
			h.Slices = append(h.Slices, apiv1.RouteHealthSlice{Start: time.Unix(p*sec, 0).UTC(), Requests: total, Failed: failed,
				Availability: float64(total-failed) / float64(total)})
		}
		h.Availability = 1
		if h.Requests > 0 {
			h.Availability = float64(h.Requests-h.Failed) / float64(h.Requests)
		}
		out.Routes = append(out.Routes, h)
	}
	return out
}

// serveRouteHealth answers GET /v1/gateway/routes/health (gateway_admin), as JSON or, with
// ?format=csv, one row per route and slice.
func (g *Gateway) serveRouteHealth(w http.ResponseWriter, r *http.Request) {
	if g.cfg.Admin != nil {
		if _, err := g.cfg.Admin.Authorize(r, auth.GatewayAdmin); err != nil {
			httpapi.WriteError(w, err)
			return
		}
	}
	ans := g.health.answer(g.cfg.Now())
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		httpapi.WriteJSON(w, http.StatusOK, ans)
	case "csv":
		err := httpapi.WriteCSV(w, "meshflows-route-health.csv", []string{"route", "slice_start", "requests", "failed", "availability"}, func(emit func(...string)) {
			for _, rt := range ans.Routes {
				for _, s := range rt.Slices {
					emit(rt.Route, s.Start.Format(time.RFC3339), strconv.FormatInt(s.Requests, 10), strconv.FormatInt(s.Failed, 10),
						strconv.FormatFloat(s.Availability, 'f', 4, 64))
				}
			}
		})
		if err != nil {
			g.cfg.Logger.Warn("writing the route health CSV failed", "error", err)
		}
	default:
		httpapi.WriteError(w, apiv1.InvalidRequest([]apiv1.Detail{{Path: "format", Message: "must be json or csv, got " + strconv.Quote(f)}}))
	}
}
