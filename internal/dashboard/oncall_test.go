package dashboard_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/dashboard"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// incidentRegistry is a registry holding instance q-1 (egress-jms in zone b) and a
// quarantine incident on it.
func incidentRegistry(t *testing.T) *registrytest.Server {
	t.Helper()
	j := journal.New(0, nil)
	log, err := incident.New(incident.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	log.Raise("quarantine", "q-1", "", "q-1 flaps")
	reg := registrytest.NewServerWith(t, registry.Config{Journal: j}, server.Config{Incidents: log, Journal: j}, registrytest.Epoch0)
	req := apiv1.RegisterRequest{InstanceID: "q-1", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9", Zone: "b",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	if _, err := reg.Registry.Register(t.Context(), &req); err != nil {
		t.Fatal(err)
	}
	return reg
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without a scale hook the button is disabled and says why, and the action is refused; with
// a command it runs it (no shell of its own: the test names one) with the service and zone.
func TestScaleProvider(t *testing.T) {
	reg := incidentRegistry(t)
	tests := []struct {
		name       string
		hook       dashboard.ScaleHook
		form       url.Values
		wantStatus int
		want       string
	}{
		{"no hook", dashboard.ScaleHook{}, url.Values{"service": {"egress-jms"}}, http.StatusConflict, "no scale hook is configured"},
		{"a command", dashboard.ScaleHook{Command: []string{"sh", "-c", `echo "scale {service}: $MESHFLOWS_SCALE_SERVICE in $MESHFLOWS_SCALE_ZONE for incident $MESHFLOWS_SCALE_INCIDENT"`}},
			url.Values{"service": {"egress-jms"}, "zone": {"b"}}, http.StatusOK, "scale egress-jms: egress-jms in b for incident 1"},
		{"a command that fails", dashboard.ScaleHook{Command: []string{"sh", "-c", "echo no capacity left; exit 3"}},
			url.Values{"service": {"egress-jms"}}, http.StatusBadGateway, "no capacity left"},
		{"no service", dashboard.ScaleHook{Command: []string{"true"}}, url.Values{"zone": {"a"}}, http.StatusBadRequest, "name the service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := dashboard.New(dashboard.Config{RegistryURL: reg.URL, Insecure: true, Scale: tt.hook})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(d.Handler())
			defer srv.Close()
			resp, err := http.PostForm(srv.URL+"/incidents/1/scale", tt.form)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(body), tt.want) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, body, tt.wantStatus, tt.want)
			}
			// the incident's page: the button enabled with a hook, disabled and explained without
			status, page := get(t, srv.URL+"/incidents/1")
			if status != 200 {
				t.Fatalf("investigate: %d %s", status, page)
			}
			disabled := strings.Contains(page, `id="scale-button" disabled`)
			if wantDisabled := len(tt.hook.Command) == 0; disabled != wantDisabled {
				t.Errorf("scale button disabled %v, want %v", disabled, wantDisabled)
			}
			switch {
			case disabled && !strings.Contains(page, "no scale hook is configured: start the dashboard with --scale-command or --scale-webhook"):
				t.Errorf("the disabled button does not say why:\n%s", page)
			case !disabled && (!strings.Contains(page, `value="egress-jms" id="scale-service"`) || !strings.Contains(page, `value="b" id="scale-zone"`)):
				t.Errorf("the form does not name the quarantined instance's service and zone:\n%s", page)
			}
		})
	}
	if status, page := get(t, mustDashboard(t, reg.URL)+"/incidents/99"); status != 404 {
		t.Errorf("an incident that does not exist: %d %s", status, page)
	}
}

func mustDashboard(t *testing.T, registryURL string) string {
	t.Helper()
	d, err := dashboard.New(dashboard.Config{RegistryURL: registryURL, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestScaleHookRefused(t *testing.T) {
	for _, h := range []dashboard.ScaleHook{
		{Command: []string{"scale"}, Webhook: "https://x.example/{service}"},
		{Webhook: "ftp://x.example/{service}"},
		{Webhook: "/scale/{service}"},
	} {
		if _, err := dashboard.New(dashboard.Config{Insecure: true, Scale: h}); err == nil {
			t.Errorf("%+v accepted", h)
		}
	}
}

// The Logs view refuses a component or a time it cannot read (it would otherwise show
// everything as if it matched), and keeps a window.
func TestLogsFilters(t *testing.T) {
	reg := incidentRegistry(t)
	base := mustDashboard(t, reg.URL)
	tests := []struct {
		query      string
		wantStatus int
		want       string
	}{
		{"component=nonsense", 200, "component &#34;nonsense&#34;: want one of"},
		{"from=yesterday", 200, "from &#34;yesterday&#34;"},
		{"component=incident", 200, "incident.opened"},
		{"from=2099-01-01T00:00", 200, "No event matches yet"},
	}
	for _, tt := range tests {
		status, page := get(t, base+"/logs?"+tt.query)
		if status != tt.wantStatus || !strings.Contains(page, tt.want) {
			t.Errorf("/logs?%s: %d, want %d with %q:\n%s", tt.query, status, tt.wantStatus, tt.want, page)
		}
	}
	if status, _ := get(t, base+"/events/fragment?since=0&component=nonsense"); status != 400 {
		t.Errorf("the live tail with an unknown component: %d, want 400", status)
	}
	if status, page := get(t, base+"/events?component=incident"); status != 200 || !strings.Contains(page, "<h1>Logs</h1>") {
		t.Errorf("/events does not lead to the Logs view: %d", status)
	}
}

func TestSliceAndCompareRefuseWhatTheyCannotDraw(t *testing.T) {
	base := mustDashboard(t, incidentRegistry(t).URL)
	seven := "capability=a&capability=b&capability=c&capability=d&capability=e&capability=f&capability=g"
	for _, q := range []string{"/slice?capability=c", "/slice?from=0", "/slice?capability=c&route=GET%20/x&from=0", "/compare", "/compare?capability=c&route=GET%20/x", "/compare?" + seven} {
		if status, page := get(t, base+q); status != 400 {
			t.Errorf("%s: %d, want 400: %s", q, status, page)
		}
	}
	// a registry without the eligibility engine keeps no timeline: said as the registry's
	if status, page := get(t, base+"/slice?capability=messaging.publish&from=0"); status != 502 || !strings.Contains(page, "eligibility engine") {
		t.Errorf("a slice without a timeline: %d %s", status, page)
	}
}

// The incidents page says who was told of an incident, how and when.
func TestIncidentSaysWhoWasTold(t *testing.T) {
	j := journal.New(0, nil)
	log, err := incident.New(incident.Config{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	in := log.Raise("quarantine", "q-1", "", "q-1 flaps")
	log.Told(in.ID, apiv1.OwnerNotice{At: time.Date(2026, 12, 7, 12, 0, 5, 0, time.UTC), Owner: "team-messaging", InstanceID: "q-1",
		Cause: "FLAPPING", Delivery: apiv1.DeliveryWebhook, Attempts: 2})
	reg := registrytest.NewServerWith(t, registry.Config{Journal: j}, server.Config{Incidents: log, Journal: j}, registrytest.Epoch0)
	d, err := dashboard.New(dashboard.Config{RegistryURL: reg.URL, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	code, page := get(t, srv.URL+"/incidents")
	if want := "told team-messaging (FLAPPING, webhook after 2 attempts) 2026-12-07 12:00:05Z"; code != http.StatusOK || !strings.Contains(html.UnescapeString(page), want) {
		t.Errorf("status %d; the incidents page lacks %q", code, want)
	}
}
