package dashboard_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/history"
	"github.com/meshflows/meshflows/internal/prober"
)

func TestDashboardInABrowser(t *testing.T) {
	s := newStack(t)
	ctx := browser(t) // cleaned up first: the browser's long polls end before the servers close
	base := s.dashboard.URL
	nav := func(path string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("main"))); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("overview", func(t *testing.T) {
		nav("/")
		if got := text(t, ctx, "#instances"); got != "2" {
			t.Errorf("instances = %q, want 2", got)
		}
		if got := text(t, ctx, "#complete"); got != "complete" {
			t.Errorf("complete = %q", got)
		}
		if got := text(t, ctx, "#table-source"); got != "fresh" {
			t.Errorf("gateway table source = %q", got)
		}
		if got := text(t, ctx, "#open-critical"); got != "1" {
			t.Errorf("open critical incidents = %q, want 1 (the sustained panic)", got)
		}
		if n := count(t, ctx, "#events-card li"); n != 5 {
			t.Errorf("latest events on the overview: %d, want 5", n)
		}
		if got := text(t, ctx, "#no-evacuation"); got != "none" {
			t.Errorf("active evacuations: %q, want none", got)
		}
		if got, want := text(t, ctx, "#outlier-instances"), "0"; got != want {
			t.Errorf("outlier instances: %q, want %q", got, want)
		}
		if got := text(t, ctx, "#zone-outliers"); got != "no zone outlier" {
			t.Errorf("zone outliers: %q", got)
		}
		for _, id := range []string{"#withdrawal-p99", "#admission-p99"} { // the budgets card
			if got := text(t, ctx, id); !strings.HasSuffix(got, " s") {
				t.Errorf("%s: %q, want seconds", id, got)
			}
		}
		screenshot(t, ctx, "overview")
	})

	t.Run("metrics", func(t *testing.T) {
		// a third sample a minute after the second: heartbeats and evictions have a rate
		if err := s.history.Sample(); err != nil {
			t.Fatal(err)
		}
		nav("/registry/metrics")
		if n := count(t, ctx, "#charts figure.chart"); n != len(history.RegistrySeries) {
			t.Errorf("charts: %d, want one per series (%d)", n, len(history.RegistrySeries))
		}
		if got := text(t, ctx, "#chart-active_instances .last"); got != "2" {
			t.Errorf("active instances now: %q, want 2", got)
		}
		if n := count(t, ctx, "#chart-active_instances circle.dot"); n != 3 {
			t.Errorf("points of active_instances: %d, want 3 (three samples)", n)
		}
		if n := count(t, ctx, "#chart-heartbeats_per_second circle.dot"); n != 2 {
			t.Errorf("points of heartbeats_per_second: %d, want 2 (a rate starts at the second sample)", n)
		}
		if n := count(t, ctx, "#grafana-link"); n != 0 {
			t.Errorf("a Grafana link without --grafana-url")
		}
		screenshot(t, ctx, "metrics")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("window-15m")), chromedp.WaitVisible(chromedp.CSS(`#window-15m.on`))); err != nil {
			t.Fatalf("the 15-minute window: %v", err)
		}
	})

	t.Run("catalog, filter and live update", func(t *testing.T) {
		nav("/capabilities")
		if n := count(t, ctx, "#catalog tbody tr"); n != 2 {
			t.Fatalf("catalog rows = %d, want 2", n)
		}
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`select[name="provider"]`), "jms")); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#filter")
		if n := count(t, ctx, "#catalog tbody tr"); n != 1 || !strings.Contains(text(t, ctx, "#catalog tbody"), "egress-jms") {
			t.Errorf("filtered rows = %d", n)
		}
		nav("/capabilities")
		req := apiv1.RegisterRequest{InstanceID: "webhook-1", ServiceName: "webhook", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
			Capabilities: []apiv1.Capability{{CapabilityID: "webhook.send", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}}}
		if _, err := s.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-instance="webhook-1"]`))); err != nil {
			t.Fatalf("the new provider did not appear live: %v", err)
		}
		screenshot(t, ctx, "capabilities")
	})

	t.Run("validation console", func(t *testing.T) {
		nav("/validation")
		if !strings.Contains(text(t, ctx, "#wf-order-publish"), "contract passed") {
			t.Errorf("workflow section: %s", text(t, ctx, "#wf-order-publish"))
		}
		// a warning marker on the content-type header line of the example workflow
		if n := count(t, ctx, "#wf-order-publish li.sev-warning"); n < 1 {
			t.Errorf("no warning marker in the example workflow")
		}
		bad := "name: broken\ninvocation:\n  type: http\nsteps:\n  - id: 1st\n    type: service_call\n    capability:\n      id: Nope\n"
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("details.upload summary")), chromedp.SetValue(chromedp.ID("upload-yaml"), bad)); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#upload")
		for _, line := range []string{"5", "8"} { // 1st (bad step id) and Nope (bad capability id)
			if n := count(t, ctx, `#uploaded li.sev-error[data-line="`+line+`"]`); n != 1 {
				t.Errorf("no error marker on line %s of the uploaded workflow", line)
			}
		}
		// the uploaded workflow's breadcrumbs: workflow › step › field › diagnostic, linking
		// to the line, which a click highlights with its tooltip
		if got := text(t, ctx, "#uploaded ul.diagnostics"); !strings.Contains(got, "broken › 1st") {
			t.Errorf("breadcrumbs of the upload: %q", got)
		}
		if n := count(t, ctx, "#publish-uploaded"); n != 0 {
			t.Errorf("a workflow that failed validation offers Publish")
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#uploaded a[data-anchor="src-uploaded-8"], #uploaded a[data-anchor="src-uploaded-L8"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#src-uploaded-L8.hl .tip`))); err != nil {
			t.Fatalf("a breadcrumb does not highlight its line with its tooltip: %v", err)
		}
		if got := text(t, ctx, "#src-uploaded-L8 .tip"); !strings.Contains(got, "error") {
			t.Errorf("line 8's tooltip: %q, want the error's code and message", got)
		}
		if got := text(t, ctx, "#src-uploaded-L8 .gutter"); got != "✖" {
			t.Errorf("line 8's gutter icon: %q, want ✖ (error)", got)
		}
		screenshot(t, ctx, "validation")
		// the Diagnostics tab: every diagnostic of every workflow, linked to its line
		nav("/validation?view=diagnostics")
		if n := count(t, ctx, "#diagnostics-table tbody tr.sev-warning"); n < 1 {
			t.Errorf("warnings in the Diagnostics tab: %d", n)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#diagnostics-table a.goto")), chromedp.WaitVisible(chromedp.CSS("ol.src li:target"))); err != nil {
			t.Fatalf("a diagnostic does not lead to its line: %v", err)
		}
		screenshot(t, ctx, "validation-diagnostics")
		// upload a good workflow and publish it from the page
		good := strings.Replace(string(workflows.OrderPublish), "name: order-publish", "name: order-console", 1)
		nav("/validation")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("details.upload summary")), chromedp.SetValue(chromedp.ID("upload-yaml"), good)); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#upload")
		submit(t, ctx, "#publish-uploaded")
		if got := text(t, ctx, "#published-note"); !strings.Contains(got, "order-console") {
			t.Errorf("after Publish: %q", got)
		}
		if got := text(t, ctx, "#wf-order-console"); !strings.Contains(got, "published") {
			t.Errorf("the published workflow's section: %q", got)
		}
		// a 100-step workflow renders without lag: measured with the Performance API
		var big strings.Builder
		big.WriteString("name: hundred\ninvocation:\n  type: http\nsteps:\n")
		for i := range 100 {
			fmt.Fprintf(&big, "  - id: step_%d\n    type: service_call\n    capability:\n      id: messaging.publish\n      version: \">=1.0.0\"\n    request:\n      destination: orders.events\n      payload: {}\n", i)
		}
		if _, err := s.orc.Upload(context.Background(), []byte(big.String())); err != nil {
			t.Fatalf("the 100-step workflow: %v", err)
		}
		nav("/validation")
		timing, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => { const n = performance.getEntriesByType("navigation")[0]; return {response: n.responseEnd - n.startTime, dom: n.domContentLoadedEventEnd - n.startTime, load: n.loadEventEnd - n.startTime}; })()`))
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, ctx, "#wf-hundred table.steps tbody tr"); n != 100 {
			t.Errorf("steps of the 100-step workflow: %d", n)
		}
		t.Logf("validation console with a 100-step workflow: response %.0f ms, DOM ready %.0f ms, loaded %.0f ms (Performance API)", timing["response"], timing["dom"], timing["load"])
		nav("/validation")
		submit(t, ctx, "#wf-order-publish .revalidate")
		resp, err := http.Get(base + "/validation/order-publish/export")
		if err != nil {
			t.Fatal(err)
		}
		var res apiv1.ValidationResult
		json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if res.Workflow != "order-publish" || len(res.Steps) != 2 {
			t.Errorf("export = %+v", res)
		}
	})

	t.Run("routes and route map", func(t *testing.T) {
		nav("/routes")
		if n := count(t, ctx, "#routes tbody tr"); n != 4 {
			t.Errorf("routes = %d, want 4", n)
		}
		resp, err := http.Post(s.gateway.URL+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"orders.events","payload":{"id":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("publish through the gateway: %d", resp.StatusCode)
		}
		// A failure injected through the gateway: a service whose only instance refuses
		// connections.
		req := apiv1.RegisterRequest{InstanceID: "broken-1", ServiceName: "egress-broken", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
			Capabilities: []apiv1.Capability{{CapabilityID: "broken.send", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
			Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-broken", Instance: "broken-1", Version: "1.0.0"},
				Routes: []apiv1.ManifestRoute{{Path: "/api/broken/send", Methods: []string{"POST"}}}}}
		if _, err := s.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for failed := 0; failed < 5; {
			resp, err := http.Post(s.gateway.URL+"/api/broken/send", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusBadGateway {
				failed++
			} else if time.Now().After(deadline) {
				t.Fatalf("the gateway never routed /api/broken/send: %d", resp.StatusCode)
			}
		}
		nav("/routes")
		broken := `#routes tr[id="POST /api/broken/send"]`
		if got := text(t, ctx, broken+" td.availability"); got != "0.00%" {
			t.Errorf("the failing route's availability: %q, want 0.00%%", got)
		}
		if n := count(t, ctx, broken+`[data-worst="panic"] rect.lv-panic`); n != 1 {
			t.Errorf("red slices in the failing route's strip: %d, want 1", n)
		}
		if n := count(t, ctx, `#routes tr[id="POST /api/broken/send"] rect`); n != 288 {
			t.Errorf("slices in a route's strip: %d, want 288", n)
		}
		nav("/routes")
		if n := count(t, ctx, `#routes tr[id="POST /api/messaging/jms/publish"][data-worst="ok"] rect.lv-ok`); n != 1 {
			t.Errorf("green slices of the route that answered: %d, want 1", n)
		}
		resp, err = http.Get(base + "/routes/health.csv")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(resp.Body).ReadAll()
		resp.Body.Close()
		if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "route,slice_start,requests,failed,availability" {
			t.Errorf("route health CSV: %v %q", err, rows)
		}
		screenshot(t, ctx, "routes")
		// a slice of a strip clicks through to its figures and its window's events; two
		// routes compare on one chart
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(broken+" a.slice rect")), chromedp.WaitVisible(chromedp.ID("slice-figures"))); err != nil {
			t.Fatalf("a route's slice: %v", err)
		}
		if got := text(t, ctx, "#slice-figures"); !strings.Contains(got, "failed") || !strings.Contains(got, "0.00% answered") {
			t.Errorf("the failing route's slice: %q", got)
		}
		if n := count(t, ctx, "#slice-logs"); n != 1 {
			t.Errorf("the slice links no logs")
		}
		screenshot(t, ctx, "route-slice")
		nav("/routes")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(broken+" input.compare")),
			chromedp.Click(chromedp.CSS(`#routes tr[id="POST /api/messaging/jms/publish"] input.compare`))); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#compare")
		if got := text(t, ctx, "#legend"); !strings.Contains(got, "POST /api/broken/send (latest 0)") || !strings.Contains(got, "POST /api/messaging/jms/publish (latest 100)") {
			t.Errorf("the comparison's legend: %q", got)
		}
		if n := count(t, ctx, "#compare-chart path"); n != 2 {
			t.Errorf("lines compared: %d, want 2", n)
		}
		screenshot(t, ctx, "routes-compare")
		nav("/routes/map")
		if n := count(t, ctx, "#routemap g.node.route"); n != 5 {
			t.Errorf("route nodes = %d, want 5 (the example providers' 4 and the broken one)", n)
		}
		if n := count(t, ctx, "#routemap g.node.instance"); n != 3 {
			t.Errorf("instance nodes = %d, want 3", n)
		}
		if n := count(t, ctx, "#routemap g.node.capability"); n != 2 {
			t.Errorf("capability nodes = %d, want 2 (messaging.publish and broken.send)", n)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#routemap a[href*="broken"] g.node.route rect`)), chromedp.WaitVisible(chromedp.ID("node-detail"))); err != nil {
			t.Fatalf("a route node's figures: %v", err)
		}
		if got := text(t, ctx, "#node-detail"); !strings.Contains(got, "5 requests") || !strings.Contains(got, "100.0% error share") {
			t.Errorf("the failing route's figures: %q", got)
		}
		// a warning about the broken instance in the journal, which its panel lists
		s.journal.Append(apiv1.Event{Type: "instance.eligibility", Severity: apiv1.SeverityWarning, Subject: "broken-1", Message: "broken-1 connection refused (test)"})
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#routemap a[href*="broken-1"] g.node.instance rect`)), chromedp.WaitVisible(chromedp.CSS(`#node-detail[data-kind="instance"]`))); err != nil {
			t.Fatalf("an instance node's figures: %v", err)
		}
		// its panel: the figures, the metadata the catalog holds, the last hour's warnings and
		// errors and the incidents it triggered
		if got := text(t, ctx, "#node-detail"); !strings.Contains(got, "eligibility") {
			t.Errorf("the instance's figures: %q", got)
		}
		if got := text(t, ctx, "#node-metadata"); !strings.Contains(got, "health") || !strings.Contains(got, "lease until") || !strings.Contains(got, "broken.send") {
			t.Errorf("the instance's metadata: %q", got)
		}
		if got := text(t, ctx, "#node-errors"); !strings.Contains(got, "broken-1 connection refused (test)") {
			t.Errorf("the instance's warnings and errors: %q", got)
		}
		if got := text(t, ctx, "#node-incidents"); !strings.HasPrefix(got, "triggered ") {
			t.Errorf("the instance's incidents: %q", got)
		}
		screenshot(t, ctx, "routemap")
		// zoom, the minimap's frame following, and filters
		before, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("routemap").getAttribute("viewBox")`))
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("zoom-in"))); err != nil {
			t.Fatal(err)
		}
		after, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("routemap").getAttribute("viewBox") + " " + document.getElementById("minimap-view").getAttribute("width")`))
		if before == "" || strings.HasPrefix(after, before) {
			t.Errorf("zoom in left the view at %q (before %q)", after, before)
		}
		nav("/routes/map?path=/broken")
		if n := count(t, ctx, "#routemap g.node.route"); n != 1 {
			t.Errorf("routes drawn with path=/broken: %d, want 1", n)
		}
		nav("/routes/map?status=failing")
		if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("routemap").textContent`)); !strings.Contains(got, "/api/broken/send") || strings.Contains(got, "/api/messaging") {
			t.Errorf("the failing routes: %q", got)
		}
		nav("/routes/map?provider=jms")
		if n := count(t, ctx, "#routemap g.node.route"); n != 2 {
			t.Errorf("routes of provider jms: %d, want 2", n)
		}
		// 50 routes, timed in the browser (Performance API)
		var many []apiv1.ManifestRoute
		for i := range 45 {
			many = append(many, apiv1.ManifestRoute{Path: fmt.Sprintf("/api/many/r%d", i), Methods: []string{"GET"}})
		}
		mreq := apiv1.RegisterRequest{InstanceID: "many-1", ServiceName: "egress-many", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
			Capabilities: []apiv1.Capability{{CapabilityID: "many.read", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}},
			Manifest:     &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-many", Instance: "many-1", Version: "1.0.0"}, Routes: many}}
		if _, err := s.reg.Registry.Register(context.Background(), &mreq); err != nil {
			t.Fatal(err)
		}
		deadline = time.Now().Add(10 * time.Second)
		for {
			nav("/routes/map")
			if count(t, ctx, "#routemap g.node.route") == 50 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the map never drew 50 routes: %d", count(t, ctx, "#routemap g.node.route"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		timing, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => { const n = performance.getEntriesByType("navigation")[0]; const m = performance.getEntriesByName("routemap-ready")[0]; return {response: n.responseEnd - n.startTime, ready: m ? m.startTime : -1, load: n.loadEventEnd - n.startTime}; })()`))
		if err != nil || timing["ready"] < 0 {
			t.Fatalf("the map's timing: %v %v", timing, err)
		}
		t.Logf("route map of 50 routes: response %.0f ms, interactive (zoom and pan ready) %.0f ms, loaded %.0f ms (Performance API)", timing["response"], timing["ready"], timing["load"])
		screenshot(t, ctx, "routemap-50")
	})

	t.Run("incidents and the health timeline", func(t *testing.T) {
		nav("/incidents")
		row := `#incidents tr.inc-open`
		if !strings.Contains(text(t, ctx, row), "messaging.publish/a") {
			t.Fatalf("open incident: %q, want the panic of messaging.publish/a", text(t, ctx, row))
		}
		if n := count(t, ctx, `#timeline tr[data-capability="messaging.publish"][data-worst="panic"] rect.lv-panic`); n != 1 {
			t.Errorf("panic slices in messaging.publish's strip: %d, want 1 (one sample so far)", n)
		}
		if n := count(t, ctx, `#timeline tr[data-capability="messaging.publish"] rect`); n != 288 {
			t.Errorf("slices in a 24-hour strip: %d, want 288", n)
		}
		screenshot(t, ctx, "incidents")
		// the capability's panic slice: its figures and the panic among the window's events
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#timeline tr[data-capability="messaging.publish"] a.slice rect`)), chromedp.WaitVisible(chromedp.ID("slice-figures"))); err != nil {
			t.Fatalf("a capability's slice: %v", err)
		}
		if got := text(t, ctx, "#slice-figures"); !strings.Contains(got, "level panic") || !strings.Contains(got, "2 instances") {
			t.Errorf("the panic slice's figures: %q", got)
		}
		if got := text(t, ctx, "#slice-events"); !strings.Contains(got, apiv1.EventPanic) {
			t.Errorf("the slice's events: %q", got)
		}
		nav("/incidents")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#timeline tr[data-capability="messaging.publish"] input.compare`))); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#compare-caps")
		if got := text(t, ctx, "#legend"); !strings.Contains(got, "messaging.publish") {
			t.Errorf("the capabilities compared: %q", got)
		}
		nav("/incidents")

		// Investigate: the panic's evidence, its logs, and a scale through the hook.
		start := time.Now()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+" a.investigate")), chromedp.WaitVisible(chromedp.ID("incident-summary"))); err != nil {
			t.Fatalf("Investigate: %v", err)
		}
		t.Logf("Investigate answered in %s", time.Since(start).Round(time.Millisecond))
		if n := count(t, ctx, "#explanations tbody tr"); n != 2 {
			t.Errorf("eligibility explanations: %d, want the capability's 2 instances in zone a", n)
		}
		if got := text(t, ctx, "#explanations"); !strings.Contains(got, "unknown") {
			t.Errorf("explanations: %q, want their state (unknown: never probed)", got)
		}
		if got := text(t, ctx, "#evidence-events"); !strings.Contains(got, apiv1.EventPanic) {
			t.Errorf("the window's events: %q, want the panic", got)
		}
		if n := count(t, ctx, "#main figure.chart, main figure.chart"); n != len(history.RegistrySeries) {
			t.Errorf("charts of the window: %d", n)
		}
		if got := text(t, ctx, "#scale-service"); got != "" {
			t.Logf("scale service field text %q", got)
		}
		svc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("scale-service").value + "/" + document.getElementById("scale-zone").value`))
		if err != nil || (svc != "egress-jms/a" && svc != "egress-rabbitmq/a") {
			t.Errorf("what Scale provider would scale: %q %v, want a messaging.publish provider in zone a", svc, err)
		}
		screenshot(t, ctx, "investigate")
		start = time.Now()
		submit(t, ctx, "#scale-button")
		t.Logf("Scale provider answered in %s", time.Since(start).Round(time.Millisecond))
		if got := text(t, ctx, "#scale-result"); !strings.Contains(got, "Asked to scale") {
			t.Errorf("scale result: %q", got)
		}
		select {
		case call := <-s.scaled:
			if call.Get("path") != "/scale/"+strings.Split(svc, "/")[0] || call.Get("zone") != "a" || call.Get("incident") == "" || call.Get("by") == "" {
				t.Errorf("the webhook was called with %v", call)
			}
		default:
			t.Error("the scale webhook was not called")
		}
		if got := text(t, ctx, "#scale-output"); !strings.Contains(got, "by one replica") {
			t.Errorf("the hook's answer is not shown: %q", got)
		}
		nav("/incidents")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+" a.logs-link")), chromedp.WaitVisible(chromedp.ID("event-rows"))); err != nil {
			t.Fatalf("View logs: %v", err)
		}
		if got := text(t, ctx, "#event-rows"); !strings.Contains(got, apiv1.EventPanic) {
			t.Errorf("the incident's logs: %q", got)
		}
		from, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("f-from").value`))
		if from == "" {
			t.Error("View logs does not bound the window")
		}
		nav("/incidents")
		resp, err := http.Get(base + "/incidents/timeline.csv")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(resp.Body).ReadAll()
		resp.Body.Close()
		if err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "capability_id,slice_start,level,instances,min_in_rotation" || rows[1][0] != "messaging.publish" {
			t.Errorf("timeline CSV: %v %q", err, rows)
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#incidents tr.inc-open input.comment"), "on it: broker restart")); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#incidents tr.inc-open .ack")
		if got := text(t, ctx, "#incidents tr.inc-acknowledged td.status"); got != "acknowledged" {
			t.Errorf("after Acknowledge: %q", got)
		}
		if got := text(t, ctx, "#incidents tr.inc-acknowledged"); !strings.Contains(got, "on it: broker restart") {
			t.Errorf("the comment is not shown on the incident: %q", got)
		}
		submit(t, ctx, "#incidents tr.inc-acknowledged .resolve")
		if got := text(t, ctx, "#unresolved"); got != "0" {
			t.Errorf("unresolved after Resolve: %q, want 0", got)
		}

		// Bulk acknowledge: tick two of three open incidents.
		for _, id := range []string{"q-1", "q-2", "q-3"} {
			s.incidents.Raise(apiv1.IncidentQuarantine, id, "", id+" flaps")
		}
		nav("/incidents")
		if got := text(t, ctx, "#open-warning"); got != "3 warning" {
			t.Errorf("open by severity: %q, want 3 warning", got)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[id^="incident-"]:nth-child(1) input.tick`)), chromedp.Click(chromedp.CSS(`tr[id^="incident-"]:nth-child(2) input.tick`)),
			chromedp.SendKeys(chromedp.ID("bulk-comment"), "known flapping after the deploy")); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#bulk-ack")
		if n := count(t, ctx, "#incidents tr.inc-acknowledged"); n != 2 {
			t.Errorf("acknowledged after the bulk action: %d, want 2", n)
		}
		if n := count(t, ctx, "#incidents tr.inc-open"); n != 1 {
			t.Errorf("still open after the bulk action: %d, want 1", n)
		}
		submit(t, ctx, "#incidents tr.inc-open .ignore")
		if n := count(t, ctx, "#incidents tr.inc-ignored"); n != 1 {
			t.Errorf("ignored: %d, want 1", n)
		}
		screenshot(t, ctx, "incidents-actions")
		// every action is in the journal, with who and why
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#incidents tr.inc-ignored a.runbook-link`)), chromedp.WaitVisible(chromedp.ID("runbook"))); err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, "#runbook h2"); !strings.Contains(got, "Eligibility") {
			t.Errorf("the incident's runbook: %q", got)
		}
		nav("/logs?subject=incident/*&type=incident.acknowledged")
		if got := text(t, ctx, "#event-rows"); strings.Count(got, "known flapping after the deploy") != 2 || !strings.Contains(got, "on it: broker restart") {
			t.Errorf("the journal's acknowledgements: %q", got)
		}

		// A workflow failing below its critical threshold: the orchestrator reports it, the
		// registry opens a trigger incident, and the console re-runs the workflow from it.
		failing := strings.NewReplacer("name: order-publish", "name: order-failing", "destination: orders.events", `destination: " "`).Replace(string(workflows.OrderPublish))
		if _, err := s.orc.Upload(context.Background(), []byte(failing)); err != nil {
			t.Fatal(err)
		}
		s.orc.Publish("order-failing")
		for range 3 {
			if run, err := s.orc.RunNow(context.Background(), "order-failing", "http", nil); err != nil || run.Status != apiv1.RunFailed {
				t.Fatalf("failing run: %+v %v", run, err)
			}
		}
		if err := s.reporter.Flush(context.Background()); err != nil {
			t.Fatalf("the orchestrator's report: %v", err)
		}
		nav("/incidents")
		trigger := `#incidents tr[data-kind="trigger"].inc-open`
		if got := text(t, ctx, trigger); !strings.Contains(got, "order-failing") || !strings.Contains(got, "critical") {
			t.Fatalf("trigger incident: %q", got)
		}
		screenshot(t, ctx, "incidents-trigger")
		submit(t, ctx, trigger+" .rerun")
		if n := count(t, ctx, "#wfrow-order-failing .run"); n != 4 {
			t.Errorf("runs of order-failing after Re-run: %d, want 4", n)
		}
		if err := s.reporter.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		nav("/logs?subject=order-failing&type=workflow.run_failed")
		if n := count(t, ctx, "#event-rows tr.ev"); n != 4 {
			t.Errorf("failed runs in the journal: %d, want 4", n)
		}
	})

	t.Run("logs: live tail, search, CSV export", func(t *testing.T) {
		nav("/events") // the old name leads to the Logs view
		if got := text(t, ctx, "h1"); got != "Logs" {
			t.Errorf("/events shows %q, want the Logs view", got)
		}
		if n := count(t, ctx, "#event-rows tr.ev"); n < 3 {
			t.Fatalf("events shown: %d, want at least the registrations", n)
		}
		if got := text(t, ctx, "#event-rows"); !strings.Contains(got, "instance.registered") || !strings.Contains(got, "egress-jms") {
			t.Errorf("events page: %q", got)
		}
		req := apiv1.RegisterRequest{InstanceID: "webhook-live", ServiceName: "webhook", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
			Capabilities: []apiv1.Capability{{CapabilityID: "webhook.send", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"}}}
		if _, err := s.reg.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#event-rows tr:first-child a.subject[href*="webhook-live"]`))); err != nil {
			t.Fatalf("the registration did not appear live at the top: %v", err)
		}
		screenshot(t, ctx, "events")
		total := count(t, ctx, "#event-rows tr.ev")
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("f-q"), "WEBHOOK-LIVE")); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#filter")
		if n := count(t, ctx, "#event-rows tr.ev"); n != 1 || n >= total {
			t.Errorf("search narrowed %d events to %d, want 1 (its registration, which says its first eligibility)", total, n)
		}
		href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("export").href`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(href)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(resp.Body).ReadAll()
		resp.Body.Close()
		if err != nil || resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" {
			t.Fatalf("export: %v %s", err, resp.Header.Get("Content-Type"))
		}
		if len(rows) != 2 || strings.Join(rows[0], ",") != "seq,time,type,severity,subject,message,attrs" || rows[1][4] != "webhook-live" ||
			!strings.Contains(rows[1][6], `"eligibility":"slow_start"`) {
			t.Errorf("export rows = %q, want the header and the registration the search found, with its first eligibility", rows)
		}
		// the subject links to its page
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#event-rows a.subject")), chromedp.WaitVisible(chromedp.ID("detail"))); err != nil {
			t.Fatalf("the subject's link: %v", err)
		}
		// level and component filters
		nav("/logs")
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("f-component"), "instance")); err != nil {
			t.Fatal(err)
		}
		submit(t, ctx, "#filter")
		types, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#event-rows tr.ev td:nth-child(4)")].map(td => td.textContent)`))
		if err != nil || len(types) == 0 {
			t.Fatalf("component instance: %v %v", types, err)
		}
		for _, ty := range types {
			if !strings.HasPrefix(ty, "instance.") {
				t.Errorf("component instance shows a %s event", ty)
			}
		}
		nav("/logs?severity=warning&component=eligibility")
		if got := text(t, ctx, "#event-rows"); !strings.Contains(got, apiv1.EventPanic) || strings.Contains(got, "instance.") {
			t.Errorf("warning eligibility events: %q", got)
		}
		nav("/logs?component=nonsense")
		if got := text(t, ctx, "main p.error"); !strings.Contains(got, "component") {
			t.Errorf("an unknown component: %q", got)
		}
		screenshot(t, ctx, "logs")
	})

	t.Run("workflows", func(t *testing.T) {
		nav("/workflows")
		if !strings.Contains(text(t, ctx, "#wfrow-order-publish"), "100%") {
			t.Errorf("workflow row: %s", text(t, ctx, "#wfrow-order-publish"))
		}
		submit(t, ctx, "#wfrow-order-publish .run-now")
		if n := count(t, ctx, "#wfrow-order-publish .run"); n != 2 {
			t.Errorf("runs after Run now = %d, want 2", n)
		}
		// the 24-hour strip: the runs so far are green, and a slice opens its runs
		if n := count(t, ctx, `#wfrow-order-publish[data-worst="ok"] a.slice rect.lv-ok`); n != 1 {
			t.Errorf("green slices of order-publish: %d, want 1", n)
		}
		if n := count(t, ctx, `#wfrow-order-publish svg rect`); n != 288 {
			t.Errorf("slices in a workflow's strip: %d, want 288", n)
		}
		// each step's providers: their leases ran out on the test's clock (nothing
		// heartbeats here), so disconnected; a heartbeat each, and they are connected
		if n := count(t, ctx, "#providers-order-publish .provider.disconnected"); n != 2 {
			t.Errorf("disconnected steps of order-publish before the heartbeats: %d, want 2", n)
		}
		for _, rec := range s.reg.Store.Records() {
			if _, err := s.reg.Registry.Heartbeat(context.Background(), rec.InstanceID, &apiv1.HeartbeatRequest{Generation: rec.Generation}); err != nil {
				t.Fatal(err)
			}
		}
		s.reg.Clock.Advance(3 * time.Second)
		nav("/workflows")
		if got := text(t, ctx, "#providers-order-publish"); !strings.Contains(got, "connected") || !strings.Contains(got, "last heartbeat 3s ago") {
			t.Errorf("the steps' providers: %q", got)
		}
		if n := count(t, ctx, "#providers-order-publish .provider.connected"); n != 2 {
			t.Errorf("connected steps of order-publish: %d, want 2", n)
		}
		screenshot(t, ctx, "workflows")
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#wfrow-order-publish a.slice rect")), chromedp.WaitVisible(chromedp.ID("slice-runs"))); err != nil {
			t.Fatalf("drill-down: %v", err)
		}
		if n := count(t, ctx, "#slice-runs tr.st-succeeded"); n != 2 {
			t.Errorf("runs of the slice: %d, want 2", n)
		}
		nav("/workflows")
		resp, err := http.Get(base + "/workflows/health.csv")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(resp.Body).ReadAll()
		resp.Body.Close()
		if err != nil || len(rows) != 4 || strings.Join(rows[0], ",") != "workflow,slice_start,runs,succeeded,success_rate,p95_ms" {
			t.Errorf("trigger health CSV: %v %q, want the header and a row per workflow", err, rows)
		}

		// A run of the strict example: nested steps indented, where each ran, the context.
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#wfrow-order-batch a.run")), chromedp.WaitVisible(chromedp.ID("run-steps"))); err != nil {
			t.Fatal(err)
		}
		if n := count(t, ctx, `#run-steps tr.depth-1[data-step="publish_order"]`); n != 2 {
			t.Errorf("publish_order rows one level down = %d, want 2 (one per iteration)", n)
		}
		if got := text(t, ctx, `#run-steps tr.depth-1[data-step="announce_rabbitmq"]`); !strings.Contains(got, "announce branch to_rabbitmq") {
			t.Errorf("the rabbitmq branch's step: %q", got)
		}
		if got := text(t, ctx, "#run-context"); !strings.Contains(got, "announcements") || strings.Contains(got, "position") {
			t.Errorf("final context: %s (want the mapped announcements, not an iteration's scratch)", got)
		}
		screenshot(t, ctx, "run")
		nav("/validation")
		if n := count(t, ctx, "#wf-order-batch table.steps tr.depth-1"); n != 4 {
			t.Errorf("nested steps in the validation console = %d, want 4", n)
		}
	})

	t.Run("evacuations", func(t *testing.T) {
		nav("/evacuations")
		if got := text(t, ctx, "#no-evacuations"); got != "No evacuation." {
			t.Errorf("before any: %q", got)
		}
		// admit both providers (two ok probes each), then evacuate their zone (both are in a:
		// nothing would remain, so it is forced)
		now := s.reg.Clock.Now()
		for _, rec := range s.reg.Store.Records() {
			for k := range 2 {
				s.reg.Registry.ReportProbe(prober.Result{Target: prober.Target{ID: rec.InstanceID, Generation: rec.Generation},
					Result: health.ProbeOK, At: now.Add(time.Duration(k) * time.Second)})
			}
		}
		s.reg.Clock.Advance(2 * time.Second)
		ev, err := s.reg.Registry.Evacuate(context.Background(), &apiv1.EvacuationRequest{Zone: "a", Duration: "2h", Reason: "drill in the browser", Force: true})
		if err != nil {
			t.Fatal(err)
		}
		nav("/evacuations")
		row := "#evacuation-" + ev.ID
		if got := text(t, ctx, row+" td.state"); got != "active" {
			t.Errorf("state: %q, want active", got)
		}
		if got := text(t, ctx, row); !strings.Contains(got, "drill in the browser") || !strings.Contains(got, "every capability") {
			t.Errorf("row: %q", got)
		}
		nav("/capabilities")
		if n := count(t, ctx, "td.el-evacuated"); n != 2 {
			t.Errorf("evacuated instances marked in the catalog: %d, want 2", n)
		}
		nav("/evacuations")
		screenshot(t, ctx, "evacuations")
		submit(t, ctx, row+" .cancel")
		if got := text(t, ctx, row+" td.state"); got != "returning (cancelled)" {
			t.Errorf("after Cancel: %q", got)
		}
		if got := text(t, ctx, row+" .step-current"); got != "10" {
			t.Errorf("the current step: %q, want 10", got)
		}
		if n := count(t, ctx, row+" .step"); n != 4 {
			t.Errorf("steps drawn: %d, want 4 (10, 25, 50, then 100)", n)
		}
	})

	// Every page fits a 1,400 px window: nothing wider than the page scrolls it sideways.
	t.Run("pages fit 1400 px", func(t *testing.T) {
		if _, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: 1400, Height: 900, DeviceScaleFactor: 1}); err != nil {
			t.Fatal(err)
		}
		defer chromedp.Call(ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{})
		for _, page := range []string{"/", "/capabilities", "/routes", "/routes/map", "/workflows", "/validation", "/logs", "/registry/metrics", "/incidents", "/incidents/1", "/evacuations"} {
			nav(page)
			w, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
			if err != nil {
				t.Fatal(err)
			}
			if w > 1400 {
				wide, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("main *")].filter(e => e.getBoundingClientRect().right > 1400).slice(0, 5).map(e => e.tagName + (e.id ? "#" + e.id : "") + "." + e.className).join(", ")`))
				t.Errorf("%s is %d px wide in a 1400 px window: %s", page, w, wide)
			}
		}
	})
}
