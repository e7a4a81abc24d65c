package dashboard_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/examples/providers/rabbitmq"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/dashboard"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/history"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/testtool"
	"github.com/meshflows/meshflows/routing"
)

// stack is the whole product in this process: registry, two example providers, gateway,
// orchestrator with the example workflow, and the dashboard over them.
type stack struct {
	reg       *registrytest.Server
	history   *history.History
	scaled    chan url.Values // what the scale webhook was called with
	dashboard *httptest.Server
	gateway   *httptest.Server
	incidents *incident.Log
	journal   *journal.Journal
	orc       *orchestrator.Orchestrator
	reporter  *report.Reporter // the orchestrator's reports to the registry (flushed by the test)
}

func newStack(t testing.TB) *stack {
	t.Helper()
	// The registry judges eligibility and raises incidents: the example providers declare
	// health and nothing probes them here, so they stay unknown, their group is in panic (all
	// of them are answered) and, after a minute, a panic incident stands.
	var reg *registrytest.Server
	events := journal.New(0, func() time.Time { return reg.Clock.Now() }) // one clock for every event
	promReg := prometheus.NewRegistry()
	hist, err := history.New(history.Config{Gatherer: promReg, Now: func() time.Time { return reg.Clock.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	incidents, err := incident.New(incident.Config{Journal: events, Now: func() time.Time { return reg.Clock.Now() }})
	if err != nil {
		t.Fatal(err)
	}
	raise, record := incident.FromTransitions(incidents, func(id string) string { return reg.Registry.Owner(id) }), journal.FromTransitions(events)
	monitor, err := health.NewMonitor(health.MonitorConfig{Registerer: promReg, OnTransition: func(t health.Transition) { record(t); raise(t) }})
	if err != nil {
		t.Fatal(err)
	}
	reg = registrytest.NewServerWith(t, registry.Config{Eligibility: monitor, Journal: events, Registerer: promReg},
		server.Config{Incidents: incidents, Journal: events, Registerer: promReg, Gatherer: promReg, History: hist}, registrytest.Epoch0)
	reg.Clock.Advance(registry.DefaultLeaseTTL) // complete answers
	for _, build := range []func(string) (*messaging.Provider, error){
		func(ep string) (*messaging.Provider, error) { return jms.New(ep, "a") },
		func(ep string) (*messaging.Provider, error) { return rabbitmq.New(ep, "a") },
	} {
		srv := httptest.NewUnstartedServer(nil)
		p, err := build("http://" + srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		srv.Config.Handler = p.Handler()
		srv.Start()
		t.Cleanup(srv.Close)
		req := p.Registration()
		if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}
	// Two sweeps a minute apart: samples of the health timeline, and the panic sustained
	// long enough to be an incident; the metrics history sampled at each.
	for range 2 {
		if _, err := reg.Registry.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := hist.Sample(); err != nil {
			t.Fatal(err)
		}
		reg.Clock.Advance(time.Minute)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gdisc, _ := discovery.New(discovery.Config{Registries: []string{reg.URL}})
	gw, err := gateway.New(gateway.Config{Discovery: gdisc, Now: reg.Clock.Now, Policy: func() routing.Policy {
		return routing.Policy{"egress-jms": {"/api/messaging/jms"}, "egress-rabbitmq": {"/api/messaging/rabbitmq"}, "egress-broken": {"/api/broken"}, "egress-many": {"/api/many"}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	gdone := make(chan error, 1)
	go func() { gdone <- gw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-gdone })
	gsrv := httptest.NewServer(gw)
	t.Cleanup(gsrv.Close)
	odisc, _ := discovery.New(discovery.Config{Registries: []string{reg.URL}})
	// the orchestrator's clock runs in real time from the registry's fake one, so that runs
	// fall in the dashboard's 24 hours and still have durations
	offset := time.Until(reg.Clock.Now())
	rep, err := report.New(report.Config{Reporter: "orchestrator-test", Send: odisc.Report})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := orchestrator.New(orchestrator.Config{Discovery: odisc, Strict: true, Reporter: rep, Now: func() time.Time { return time.Now().Add(offset) }})
	if _, err := o.Upload(context.Background(), workflows.OrderPublish); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-publish")
	if _, err := o.RunNow(context.Background(), "order-publish", "http", json.RawMessage(`{"order":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Upload(context.Background(), workflows.OrderBatch); err != nil {
		t.Fatal(err)
	}
	o.Publish("order-batch")
	batchRun, err := o.RunNow(context.Background(), "order-batch", "http", json.RawMessage(`{"batch":"b1","orders":[{"id":1},{"id":2}]}`))
	if err != nil || batchRun.Status != apiv1.RunSucceeded {
		t.Fatalf("order-batch run: %v %+v", err, batchRun)
	}
	osrv := httptest.NewServer(o.Handler())
	t.Cleanup(osrv.Close)
	// the scale hook: a webhook that records what it is asked
	scaled := make(chan url.Values, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]string
		json.NewDecoder(r.Body).Decode(&body)
		scaled <- url.Values{"path": {r.URL.Path}, "zone": {r.URL.Query().Get("zone")}, "service": {body["service"]}, "incident": {body["incident"]}, "by": {body["by"]}}
		io.WriteString(w, "scaling "+body["service"]+" by one replica\n")
	}))
	t.Cleanup(hook.Close)
	d, err := dashboard.New(dashboard.Config{RegistryURL: reg.URL, GatewayURL: gsrv.URL, OrchestratorURL: osrv.URL, Insecure: true, Now: reg.Clock.Now,
		Scale: dashboard.ScaleHook{Webhook: hook.URL + "/scale/{service}?zone={zone}"}})
	if err != nil {
		t.Fatal(err)
	}
	dsrv := httptest.NewServer(d.Handler())
	t.Cleanup(dsrv.Close)
	// the gateway's first table
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(gsrv.URL + "/v1/gateway/routes")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway never derived a table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &stack{reg: reg, history: hist, scaled: scaled, dashboard: dsrv, gateway: gsrv, incidents: incidents, journal: events, orc: o, reporter: rep}
}

// browser starts Debian's Chromium headless; the test is skipped only where it is absent
// (.ci/run installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := testtool.Need(t, "apt-get install chromium", "/usr/bin/chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancel(); cancelA() })
	return ctx
}

// shots is where the screenshots go: a temporary folder, never the repository.
var shots = filepath.Join(os.TempDir(), "meshflows-dashboard-screenshots")

// update rewrites the console guide's screenshots (docs/images) from this run, as -update
// rewrites golden files elsewhere.
var update = flag.Bool("update", false, "rewrite docs/images/console-*.jpg, the console guide's screenshots, from the browser test")

// guideShots are the pages whose screenshots the console guide shows, as docs/images/console-NAME.jpg.
var guideShots = []string{"overview", "capabilities", "validation", "routemap", "incidents", "investigate", "logs", "workflows", "metrics", "evacuations"}

func screenshot(t *testing.T, ctx context.Context, name string) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	os.MkdirAll(shots, 0o755)
	p := filepath.Join(shots, name+".png")
	os.WriteFile(p, png, 0o644)
	t.Logf("screenshot: %s", p)
	if *update && slices.Contains(guideShots, name) {
		jpg, err := chromedp.Run(ctx, chromedp.FullScreenshot(80)) // JPEG: a tenth of the PNG's bytes
		if err != nil {
			t.Fatalf("screenshot %s for the guide: %v", name, err)
		}
		p := filepath.Join("..", "..", "docs", "images", "console-"+name+".jpg")
		if err := os.WriteFile(p, jpg, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", p)
	}
}

// TestConsoleGuideShowsEveryScreenshot: each screenshot the browser test takes for the guide
// exists, is a JPEG, and is shown by docs/console.md (run the browser test with -update to
// take them again).
func TestConsoleGuideShowsEveryScreenshot(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "console.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range guideShots {
		file := "console-" + name + ".jpg"
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", "images", file))
		switch {
		case err != nil:
			t.Errorf("%s: %v (go test ./internal/dashboard/ -run TestDashboardInABrowser -update)", file, err)
		case len(b) < 3 || b[0] != 0xff || b[1] != 0xd8 || b[2] != 0xff:
			t.Errorf("%s is not a JPEG", file)
		}
		if !strings.Contains(string(guide), "](images/"+file+")") {
			t.Errorf("docs/console.md does not show images/%s", file)
		}
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll("+strconv.Quote(sel)+").length"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// submit clicks a button that submits a form and waits for the next document to load: the
// old document is marked, and the wait ends when the mark is gone.
func submit(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("window.__mfOld = true"), chromedp.Click(chromedp.CSS(sel))); err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		gone, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("window.__mfOld === undefined && document.readyState === 'complete'"))
		if err == nil && gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new page after clicking %s", sel)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
