package gateway_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// A failure injected upstream shows in the route's availability, its series and the CSV;
// a route that leaves the table leaves them.
func TestRouteHealth(t *testing.T) {
	e := newEnv(t)
	var failing atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	e.register(t, "orders-a", up.URL, ordersRoutes...)
	registrytest.Until(t, "served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	for range 5 {
		e.do(t, "GET", "/orders/1", "")
	}
	failing.Store(true)
	for range 4 {
		e.do(t, "POST", "/orders/1", "{}")
	}
	e.do(t, "GET", "/orders/1/missing", "") // no route: counted nowhere

	var h apiv1.RouteHealthResponse
	if err := json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes/health", "").body), &h); err != nil {
		t.Fatal(err)
	}
	byRoute := map[string]apiv1.RouteHealth{}
	for _, r := range h.Routes {
		byRoute[r.Route] = r
	}
	get, post := byRoute["GET /orders/{id}"], byRoute["POST /orders/{id}"]
	if get.Requests < 6 || get.Failed != 0 || get.Availability != 1 || len(get.Slices) != 1 {
		t.Errorf("GET route = %+v, want every request answered", get)
	}
	if post.Requests != 4 || post.Failed != 4 || post.Availability != 0 || h.SliceSeconds != 300 {
		t.Errorf("POST route = %+v, want 4 failed of 4", post)
	}
	if _, ok := byRoute["GET /static/{rest...}"]; !ok {
		t.Errorf("the static route has no health: %+v", h.Routes)
	}
	if got := testutil.ToFloat64(counterOf(t, e, "POST /orders/{id}", "5xx")); got != 4 {
		t.Errorf("POST 5xx series = %v, want 4", got)
	}
	// the CSV: a header and a row per route and slice
	r := e.do(t, "GET", "/v1/gateway/routes/health?format=csv", "")
	rows, err := csv.NewReader(bytes.NewReader([]byte(r.body))).ReadAll()
	if err != nil || r.header.Get("Content-Type") != "text/csv; charset=utf-8" || strings.Join(rows[0], ",") != "route,slice_start,requests,failed,availability" {
		t.Fatalf("csv: %v %q %q", err, r.header.Get("Content-Type"), rows)
	}
	if r := e.do(t, "GET", "/v1/gateway/routes/health?format=xml", ""); r.status != 400 {
		t.Errorf("format=xml: %d", r.status)
	}
	// the route leaves the table: its series go
	if err := e.reg.Registry.Deregister(context.Background(), "orders-a", 0); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "the route is withdrawn", func() bool {
		r := e.do(t, "GET", "/orders/1", "")
		return r.status == 503 && strings.Contains(r.body, "no upstream left")
	})
	if n := testutil.CollectAndCount(e.prom, "meshflows_gateway_route_requests_total"); n != 4 {
		t.Errorf("series after the route left: %d, want the static route's 4 classes", n)
	}
}

func counterOf(t *testing.T, e *env, route, class string) prometheus.Collector {
	t.Helper()
	mfs, err := e.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "copy"})
	for _, mf := range mfs {
		if mf.GetName() != "meshflows_gateway_route_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code_class"] == class {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
}
