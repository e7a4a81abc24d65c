package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/dashboard"
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
	// read-only pages render without the components, saying what is unavailable
	resp, err := http.Get(srv.URL + "/capabilities")
	if err != nil {
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

// BenchmarkCatalogPage renders /capabilities for 1,000 instances × 3 capabilities (server
// time, the registry answering from memory).
func BenchmarkCatalogPage(b *testing.B) {
	s := newStack(b)
	for i := range 1000 {
		body := fmt.Sprintf(`{"instance_id":"b-%d","service_name":"svc-%d","service_version":"1.0.0","endpoint":"http://127.0.0.1:%d","capabilities":[
{"capability_id":"a.read","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p1"},
{"capability_id":"a.write","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p2"},
{"capability_id":"a.audit","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p3"}]}`, i, i/10, 10000+i)
		resp, err := http.Post(s.reg.URL+"/v1/services/register", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	for b.Loop() {
		resp, err := http.Get(s.dashboard.URL + "/capabilities")
		if err != nil {
			b.Fatal(err)
		}
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
