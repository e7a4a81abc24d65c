package dashboard_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/dashboard"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

func TestWriteActionsNeedTheToken(t *testing.T) {
	if _, err := dashboard.New(dashboard.Config{}); err == nil {
		t.Error("a dashboard without a token and not insecure was built")
	}
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {"s3cret", 502}} { // 502: no gateway or orchestrator configured
		resp, err := noRedirect.PostForm(srv.URL+"/capabilities/refresh", url.Values{"token": {tc.token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want && !(tc.want == 502 && resp.StatusCode == http.StatusSeeOther) {
			t.Errorf("token %q: status %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	// read-only pages need a sign-in too, and render without the components, saying what is
	// unavailable
	resp, err := noRedirect.Get(srv.URL + "/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login?next=") {
		t.Errorf("/capabilities without a credential = %d (Location %q), want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/capabilities", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/capabilities without a registry = %d", resp.StatusCode)
	}
}

// TestMetricsLinks: with --grafana-url each page links its Grafana dashboard; without, none;
// a URL that is not http(s) is refused.
func TestMetricsLinks(t *testing.T) {
	if _, err := dashboard.New(dashboard.Config{Insecure: true, GrafanaURL: "javascript:alert(1)"}); err == nil {
		t.Error("a javascript: Grafana URL was accepted")
	}
	tests := []struct {
		grafana, path, want string
	}{
		{"https://grafana.example.com/", "/", `href="https://grafana.example.com/d/meshflows-registry"`},
		{"https://grafana.example.com", "/capabilities", `href="https://grafana.example.com/d/meshflows-providers"`},
		{"https://grafana.example.com", "/routes", `href="https://grafana.example.com/d/meshflows-routes"`},
		{"https://grafana.example.com", "/workflows", `href="https://grafana.example.com/d/meshflows-routes"`},
		{"", "/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.grafana+tt.path, func(t *testing.T) {
			d, err := dashboard.New(dashboard.Config{Insecure: true, GrafanaURL: tt.grafana})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			d.Handler().ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
			body := rec.Body.String()
			if tt.want == "" && strings.Contains(body, `id="metrics-link"`) || tt.want != "" && !strings.Contains(body, tt.want) {
				t.Errorf("page %s: metrics link %q missing or unexpected", tt.path, tt.want)
			}
		})
	}
}

var catalogSize = flag.Int("catalog-instances", 1000, "instances in the catalog of BenchmarkCatalogPage")

// BenchmarkCatalogPage renders /capabilities for -catalog-instances instances × 3
// capabilities (server time, the registry answering from memory): 500 rows, the counts over
// the whole catalog.
func BenchmarkCatalogPage(b *testing.B) {
	s := newStack(b)
	for i := range *catalogSize {
		req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("b-%d", i), ServiceName: fmt.Sprintf("svc-%d", i/10), ServiceVersion: "1.0.0",
			Endpoint: fmt.Sprintf("http://127.0.0.1:%d", 10000+i%50000), Capabilities: []apiv1.Capability{
				{CapabilityID: "a.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p1"},
				{CapabilityID: "a.write", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p2"},
				{CapabilityID: "a.audit", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p3"}}}
		if _, err := s.reg.Registry.Register(context.Background(), &req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(s.dashboard.URL + "/capabilities")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // the whole page: a body left unread cuts its rendering short
		resp.Body.Close()
	}
}

// BenchmarkRouteMapPage renders /routes/map for the stack's routes.
func BenchmarkRouteMapPage(b *testing.B) {
	s := newStack(b)
	for b.Loop() {
		resp, err := http.Get(s.dashboard.URL + "/routes/map")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// TestRoutesPageSaysWhenTheGatewayShowsOnlyASummary: a gateway that shows the dashboard's
// identity a summary (no gateway_admin) is reported as such on the routes pages, not as an
// empty table.
func TestRoutesPageSaysWhenTheGatewayShowsOnlyASummary(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"summary":true,"route_count":7,"full_table":"identity \"dashboard\" may not do this"}`)
	}))
	defer gw.Close()
	d, err := dashboard.New(dashboard.Config{GatewayURL: gw.URL, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	for _, page := range []string{"/routes", "/routes/map"} {
		resp, err := http.Get(srv.URL + page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "7 routes, not shown") || !strings.Contains(string(body), "gateway_admin") {
			t.Errorf("%s does not say the table was withheld:\n%s", page, body)
		}
	}
}

// TestRoutesPageShowsTheRegions: a regional gateway's regions are on the routes page: each
// region's state and share, a way back's step and whether it is held, and a stale signal.
func TestRoutesPageShowsTheRegions(t *testing.T) {
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == apiv1.PathGatewayRegions {
			fmt.Fprint(w, `{"home":"a","priority":["a","b"],"signal":{"configured":true,"read":true,"stale":true,"error":"context deadline exceeded"},
				"regions":[{"region":"a","on":true,"share":0.05,"ramping":true,"step":1,"held":true,"requests":120,"errors":30,"view_source":"fresh"},
				{"region":"b","on":false,"share":0,"requests":0,"errors":0,"view_source":"snapshot","view_age_seconds":12}]}`)
			return
		}
		fmt.Fprint(w, `{"summary":true,"route_count":7,"full_table":"identity \"dashboard\" may not do this"}`)
	}))
	defer gw.Close()
	d, err := dashboard.New(dashboard.Config{GatewayURL: gw.URL, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/routes")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`id="region-a" data-share="0.05"`, "step 1", "<b>held</b>", `id="region-b"`, "<b>off</b>", "snapshot, 12 s old", "<b class=\"sev-error\">stale</b>"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the routes page lacks %q", want)
		}
	}
}

// TestCapabilitiesTableOfALargeFleet: the capabilities page lists at most TableLimit
// instances of those the filters keep and says how many more match; its counts, and the
// filters' lists of providers and capabilities (each name once, sorted), cover the whole
// catalog. The registry is a real one: it counts (GET /v1/catalog/summary), the page never
// reads the catalog whole.
func TestCapabilitiesTableOfALargeFleet(t *testing.T) {
	const n = 60
	reg := registrytest.NewServer(t, registry.Config{})
	target, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var catalogRead atomic.Bool
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == apiv1.PathServices {
			catalogRead.Store(true)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer spy.Close()
	// Instance i registers (i%4)*20 s after the first, so that a lease TTL later its lease
	// has 0 s (stale), 20 s (expiring soon), 40 s or 60 s left.
	start := reg.Clock.Now()
	for step := range 4 {
		for i := step; i < n; i += 4 {
			req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("i-%02d", i), ServiceName: fmt.Sprintf("svc-%d", i%3), ServiceVersion: "1.0.0",
				Endpoint: fmt.Sprintf("http://127.0.0.1:%d", 20000+i),
				Capabilities: []apiv1.Capability{
					{CapabilityID: fmt.Sprintf("cap.n%d", i%5), CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: fmt.Sprintf("p%d", i%2)},
					{CapabilityID: "cap.shared", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p0"},
				}}
			if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
				t.Fatal(err)
			}
		}
		reg.Clock.Advance(20 * time.Second)
	}
	reg.Clock.Advance(start.Add(registry.DefaultLeaseTTL).Sub(reg.Clock.Now()))
	d, err := dashboard.New(dashboard.Config{RegistryURL: spy.URL, Insecure: true, TableLimit: 10, Now: reg.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		query         string
		rows          int
		want, wantNot []string
	}{
		{"", 10, []string{"10</span> of 60 instances shown", "15 expiring soon, 15 stale.", "The first 10 of the 60 that match",
			`data-instance="i-00"`, `data-instance="i-27"`, `class="readiness readiness-none"`}, []string{`data-instance="i-30"`, `id="detail"`}},
		{"service_name=svc-1", 10, []string{"The first 10 of the 20 that match"}, nil},
		{"service_name=svc-1&capability_id=cap.n3", 4, []string{"4</span> of 60 instances shown"}, []string{`id="truncated"`}},
		{"provider=p1&capability_id=cap.shared", 0, []string{"0</span> of 60 instances shown"}, []string{`id="truncated"`}},
		// the detail of an instance outside the rows shown, and of one gone since the link was drawn
		{"instance=i-59", 10, []string{`<h2>i-59</h2>`}, nil},
		{"instance=gone", 10, []string{"10</span> of 60 instances shown"}, []string{`id="detail"`}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/capabilities?" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			page := string(b)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, page)
			}
			if got := strings.Count(page, "data-instance="); got != tc.rows {
				t.Errorf("%d rows, want %d", got, tc.rows)
			}
			for _, s := range tc.want {
				if !strings.Contains(page, s) {
					t.Errorf("the page lacks %q", s)
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(page, s) {
					t.Errorf("the page has %q", s)
				}
			}
			for _, list := range [][]string{{"p0", "p1"}, {"cap.n0", "cap.n1", "cap.n2", "cap.n3", "cap.n4", "cap.shared"}} {
				at := -1
				for _, name := range list {
					opt := ">" + name + "</option>"
					if c := strings.Count(page, opt); c != 1 {
						t.Fatalf("option %s appears %d times, want once", name, c)
					}
					i := strings.Index(page, opt)
					if i < at {
						t.Errorf("option %s is out of order", name)
					}
					at = i
				}
			}
		})
	}
	if catalogRead.Load() {
		t.Error("the page read the whole catalog (GET /v1/services)")
	}
	// the live table's fragment says its revision, and how long to wait before the next
	resp, err := http.Get(srv.URL + "/capabilities/fragment?service_name=svc-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Registry-Revision") == "" || resp.Header.Get("X-Refresh-After") != "1000" || strings.Count(string(b), "data-instance=") != 10 {
		t.Errorf("fragment: revision %q, refresh after %q, %d rows", resp.Header.Get("X-Registry-Revision"), resp.Header.Get("X-Refresh-After"), strings.Count(string(b), "data-instance="))
	}
}

// TestRouteMapReadsTheCatalogOnlyToDrawIt: a table within MapLimit is drawn with the
// instances the catalog names; a larger one is listed, and the catalog (at a million
// instances some 700 MB of JSON) is not read for it.
func TestRouteMapReadsTheCatalogOnlyToDrawIt(t *testing.T) {
	routes := []routing.Route{
		{Pattern: "/a/{rest...}", Method: "GET", Source: "manifest", Service: "svc-a", Version: "1.0.0", Instances: []string{"a-1"}},
		{Pattern: "/b/{rest...}", Method: "GET", Source: "manifest", Service: "svc-b", Version: "1.0.0", Instances: []string{"b-1"}},
		{Pattern: "/c/{rest...}", Method: "GET", Source: "manifest", Service: "svc-c", Version: "1.0.0", Instances: []string{"c-1"}},
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(routing.RoutesAnswer{Canonical: routing.Canonical{Routes: routes}})
	}))
	defer gw.Close()
	var catalogReads atomic.Int32
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != apiv1.PathServices {
			http.NotFound(w, r)
			return
		}
		catalogReads.Add(1)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(apiv1.CatalogResponse{RegistryEpoch: "e", Instances: []apiv1.Instance{{InstanceID: "a-1", ServiceName: "svc-a",
			ServiceVersion: "1.0.0", Endpoint: "http://a-1:8080", Eligibility: apiv1.EligibilityServing, Weight: 100,
			Capabilities: []apiv1.Capability{{CapabilityID: "cap.a", Provider: "p"}}}}})
	}))
	defer reg.Close()
	for _, tc := range []struct {
		name     string
		mapLimit int
		reads    int32
		want     string
	}{
		{"drawn", 10, 1, "svc-a 1.0.0 at http://a-1:8080"},
		{"listed", 2, 0, "GET /c/{rest...} → svc-c@1.0.0 (c-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			catalogReads.Store(0)
			d, err := dashboard.New(dashboard.Config{GatewayURL: gw.URL, RegistryURL: reg.URL, Insecure: true, MapLimit: tc.mapLimit})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(d.Handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/routes/map")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if n := catalogReads.Load(); n != tc.reads || !strings.Contains(html.UnescapeString(string(body)), tc.want) {
				t.Errorf("the catalog was read %d times (want %d), or the page lacks %q:\n%s", n, tc.reads, tc.want, body)
			}
		})
	}
}

// TestRegistryFailover: the dashboard's --registry takes a failover list, as every other
// command's: with the first registry down, the first page already comes from the next.
func TestRegistryFailover(t *testing.T) {
	reg := registrytest.NewServer(t, registry.Config{})
	req := registrytest.Orders("orders-1", "http://127.0.0.1:20001")
	if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	d, err := dashboard.New(dashboard.Config{RegistryURLs: []string{dead.URL, reg.URL}, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	// the very first page: the first registry refuses connections, and the next answers it
	for _, page := range []string{"/", "/capabilities"} {
		resp, err := http.Get(srv.URL + page)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body := string(b); strings.Contains(body, "connection refused") || (page == "/capabilities" && !strings.Contains(body, "orders-1")) {
			t.Errorf("%s, the first registry down: the page did not come from the next one:\n%.2000s", page, body)
		}
	}
}

// TestCancelARunFromItsPage: the page of a run in progress has a Cancel button, which asks
// the orchestrator to cancel that run (with the admin token); an ended run has none.
func TestCancelARunFromItsPage(t *testing.T) {
	var cancelled atomic.Value
	status := atomic.Value{}
	status.Store(apiv1.RunRunning)
	orc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/workflows/slow/runs/run-1/cancel":
			cancelled.Store(r.URL.Path)
			status.Store(apiv1.RunCancelled)
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"cancelled": true}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/workflows/slow/runs/run-1":
			json.NewEncoder(w).Encode(apiv1.Run{RunID: "run-1", Workflow: "slow", Trigger: "http", Status: status.Load().(string), Note: "cancelled: by ops"})
		default:
			http.NotFound(w, r)
		}
	}))
	defer orc.Close()
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret", OrchestratorURL: orc.URL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	page := func() string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/workflows/slow/runs/run-1", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := page(); !strings.Contains(p, `action="/workflows/slow/runs/run-1/cancel"`) {
		t.Fatalf("the page of a running run has no cancel form:\n%s", p)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"s3cret", http.StatusSeeOther}} {
		resp, err := noRedirect.PostForm(srv.URL+"/workflows/slow/runs/run-1/cancel", url.Values{"token": {tc.token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("cancel with token %q = %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	if cancelled.Load() == nil {
		t.Fatal("the orchestrator was not asked to cancel")
	}
	if p := page(); strings.Contains(p, "cancel-run") || !strings.Contains(p, "cancelled: by ops") {
		t.Errorf("the page of the cancelled run:\n%s", p)
	}
}

// TestCatalogShowsEachReplicasErrorShareBesideItsPeers: an instance failing 4 % among peers
// at 0.1 % shows its share and the baseline in the catalog row, and its detail names the
// reporters and the cohort it is compared with.
func TestCatalogShowsEachReplicasErrorShareBesideItsPeers(t *testing.T) {
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.NewServer(t, registry.Config{Eligibility: m})
	var outs []apiv1.Outcome
	for i := range 4 {
		req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("i-%d", i), ServiceName: "svc", ServiceVersion: "1.0.0", Zone: "z1",
			Endpoint:     fmt.Sprintf("http://127.0.0.1:%d", 20000+i),
			Capabilities: []apiv1.Capability{{CapabilityID: "cap.a", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}}
		resp, err := reg.Registry.Register(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		errs := 1
		if i == 0 {
			errs = 40
		}
		outs = append(outs, apiv1.Outcome{InstanceID: req.InstanceID, Generation: resp.Generation, OK: 1000 - errs, Errors: errs, LatencyMsP99: 7})
	}
	if _, err := reg.Registry.Outcomes(context.Background(), &apiv1.OutcomesRequest{GatewayID: "gw-1", Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{RegistryURL: reg.URL, Insecure: true, Now: reg.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/capabilities?instance=i-0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	for _, want := range []string{
		`<td class="errshare"><b>4.00%</b> · peers 0.10%</td>`,
		`<td class="errshare"><b>0.10%</b> · peers 0.10%</td>`,
		`40 errors in 1000 requests, p99 7.0 ms`,
		`<td>gw-1</td><td>1000</td><td>40</td>`,
		`<td>cap.a / z1</td><td>3</td><td>0.10%</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// TestRouteMapNodeDetail: a click on a node (?node=ID) opens its panel with the metadata the
// catalog holds for it, the warnings and errors of the last hour about it or its instances
// (not info lines, not other nodes' lines, the newest first) and the incidents it raised.
func TestRouteMapNodeDetail(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(routing.RoutesAnswer{Canonical: routing.Canonical{Routes: []routing.Route{
			{Pattern: "/a/{rest...}", Method: "GET", Source: "manifest", Service: "svc-a", Version: "1.0.0", Instances: []string{"a-1", "a-2"}},
			{Pattern: "/b/{rest...}", Method: "GET", Source: "manifest", Service: "svc-b", Version: "1.0.0", Instances: []string{"b-1"}},
		}}})
	}))
	defer gw.Close()
	var eventsFrom atomic.Value
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		inst := func(id, svc, capID string) apiv1.Instance {
			return apiv1.Instance{InstanceID: id, ServiceName: svc, ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080",
				Zone: "zone-1", Health: "passing", Eligibility: apiv1.EligibilityServing, Weight: 100, RegisteredAt: now.Add(-time.Hour), LeaseExpiresAt: now.Add(20 * time.Second),
				Capabilities: []apiv1.Capability{{CapabilityID: capID, CapabilityVersion: "1.2.0", Provider: "p-" + svc, ContractSchemaVersion: "1",
					Metadata: json.RawMessage(`{ "region": "eu",  "tier": 2 }`)}}}
		}
		switch r.URL.Path {
		case apiv1.PathServices:
			json.NewEncoder(w).Encode(apiv1.CatalogResponse{RegistryEpoch: "e", Instances: []apiv1.Instance{
				inst("a-1", "svc-a", "cap.a"), inst("a-2", "svc-a", "cap.a"), inst("b-1", "svc-b", "cap.b")}})
		case apiv1.PathEvents:
			eventsFrom.Store(r.URL.Query().Get("from"))
			ev := func(min int, sev, subject, msg string) apiv1.Event {
				return apiv1.Event{Seq: int64(min), Time: now.Add(time.Duration(min-60) * time.Minute), Type: "instance.eligibility", Severity: sev, Subject: subject, Message: msg}
			}
			json.NewEncoder(w).Encode(apiv1.EventsResponse{Events: []apiv1.Event{ // oldest first
				ev(10, apiv1.SeverityWarning, "a-1", "a-1 probe timed out"),
				ev(20, apiv1.SeverityInfo, "a-1", "a-1 admitted"),
				ev(30, apiv1.SeverityError, "b-1", "b-1 quarantined"),
				ev(40, apiv1.SeverityError, "a-2", "a-2 quarantined"),
				ev(50, apiv1.SeverityWarning, "cap.a/zone-1", "cap.a in zone-1 in panic"),
			}})
		case apiv1.PathIncidents:
			json.NewEncoder(w).Encode(apiv1.IncidentsResponse{Incidents: []apiv1.Incident{
				{ID: "1", Kind: "quarantine", Subject: "a-2", Status: apiv1.IncidentOpen, Occurrences: 3},
				{ID: "2", Kind: "panic", Subject: "cap.a/zone-1", Status: apiv1.IncidentResolved, Occurrences: 1},
				{ID: "3", Kind: "quarantine", Subject: "b-1", Status: apiv1.IncidentOpen, Occurrences: 1},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer reg.Close()
	d, err := dashboard.New(dashboard.Config{GatewayURL: gw.URL, RegistryURL: reg.URL, Insecure: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	tests := []struct {
		node      string
		want      []string // in this order
		notWanted []string
	}{
		{"4|a-1", []string{"zone zone-1, health passing", "lease until 2026-12-05T12:00:20Z", `cap.a 1.2.0 metadata {"region":"eu","tier":2}`,
			"a-1 probe timed out", "triggered 0 incidents (0 occurrences), 0 unresolved"}, []string{"a-1 admitted", "quarantined", "panic"}},
		{"2|cap.a@1.2.0", []string{`contract schema 1, metadata {"region":"eu","tier":2}`, "cap.a in zone-1 in panic", "a-2 quarantined", "a-1 probe timed out",
			"triggered 2 incidents (4 occurrences), 1 unresolved"}, []string{"b-1"}},
		{"0|GET /b/{rest...}", []string{"b-1 quarantined", "triggered 1 incident (1 occurrence), 1 unresolved"}, []string{"a-1", "a-2", "Metadata"}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/routes/map?node=" + url.QueryEscape(tc.node))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			page := html.UnescapeString(string(b))
			i := strings.Index(page, `id="node-detail"`)
			if resp.StatusCode != 200 || i < 0 {
				t.Fatalf("status %d, no detail panel:\n%s", resp.StatusCode, page)
			}
			panel := page[i : i+strings.Index(page[i:], "</section>")]
			at := 0
			for _, w := range tc.want {
				j := strings.Index(panel[at:], w)
				if j < 0 {
					t.Errorf("the panel lacks %q after offset %d:\n%s", w, at, panel)
					continue
				}
				at += j
			}
			for _, w := range tc.notWanted {
				if strings.Contains(panel, w) {
					t.Errorf("the panel shows %q:\n%s", w, panel)
				}
			}
		})
	}
	if got, want := eventsFrom.Load(), now.Add(-time.Hour).Format(time.RFC3339); got != want {
		t.Errorf("the events were asked from %v, want the last hour (%s)", got, want)
	}
}
