package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/meshflows/meshflows/examples/workflows"
)

// TestOpenAPIDescribesTheServers drives real requests through the registry, gateway and
// orchestrator of 'meshflows dev' and validates every request and every response against
// docs/openapi.yaml; every operation of the document must be exercised, so the reference
// cannot drift from the code in either direction.
func TestOpenAPIDescribesTheServers(t *testing.T) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	devCtx, cancel := context.WithCancel(ctx)
	base, done := startDev(t, devCtx)
	t.Cleanup(func() { cancel(); <-done })
	registry := "http://127.0.0.1:" + strconv.Itoa(base+devRegistryOffset)
	orchestrator := "http://127.0.0.1:" + strconv.Itoa(base+devOrchestratorOffset)
	gateway := "http://127.0.0.1:" + strconv.Itoa(base+devGatewayOffset)
	// the document's server is a template for people; the router needs this run's ports
	jms := "http://127.0.0.1:" + strconv.Itoa(base+devProviderOffsetJMS)
	doc.Servers = openapi3.Servers{{URL: registry}, {URL: orchestrator}, {URL: gateway}, {URL: jms}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// the example workflow runs once both providers are registered
	waitDevReady(t, base)

	// a gateway of this test acknowledges everything to come, so that it never holds up the
	// providers' drain when meshflows dev stops
	var health struct {
		Epoch string `json:"registry_epoch"`
	}
	resp, err := http.Get(registry + "/v1/discovery/health")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	ack := fmt.Sprintf(`{"gateway_id":"openapi-gw","registry_epoch":%q,"revision":%d}`, health.Epoch, int64(1)<<50)

	// current sets a conditional request's If-None-Match, or a long poll's index, to what the
	// registry holds now
	current := func(req *http.Request) {
		resp, err := http.Get(registry + "/v1/discovery/capabilities")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.URL.Query().Has("index") {
			q := req.URL.Query()
			q.Set("index", resp.Header.Get("X-Registry-Revision"))
			req.URL.RawQuery = q.Encode()
			return
		}
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	}

	copyYAML := strings.Replace(string(workflows.OrderPublish), "name: order-publish", "name: openapi-copy", 1)
	register := `{"instance_id":"openapi-1","service_name":"openapi-probe","service_version":"1.0.0","endpoint":"http://127.0.0.1:9",
		"capabilities":[{"capability_id":"probe.check","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"probe"}]}`
	covered := map[string]bool{}
	for _, c := range []struct {
		name, method, url, contentType, body string
		prepare                              func(*http.Request)
		want                                 int
	}{
		{name: "register", method: "POST", url: registry + "/v1/services/register", contentType: "application/json", body: register, want: 200},
		{name: "register invalid", method: "POST", url: registry + "/v1/services/register", contentType: "application/json", body: `{"instance_id":"x"}`, want: 400},
		{name: "heartbeat", method: "PUT", url: registry + "/v1/services/openapi-1/heartbeat", contentType: "application/json", body: `{"generation":3,"health":"degraded"}`, want: 200},
		{name: "heartbeat unknown", method: "PUT", url: registry + "/v1/services/nobody/heartbeat", contentType: "application/json", body: `{"generation":1}`, want: 404},
		{name: "instance", method: "GET", url: registry + "/v1/services/openapi-1", want: 200},
		{name: "catalog", method: "GET", url: registry + "/v1/services", want: 200},
		{name: "catalog summary", method: "GET", url: registry + "/v1/catalog/summary?capability_id=messaging.publish&limit=1", want: 200},
		{name: "catalog summary refused", method: "GET", url: registry + "/v1/catalog/summary?limit=many", want: 400},
		{name: "capabilities", method: "GET", url: registry + "/v1/discovery/capabilities?capability_id=messaging.publish&version=%3E%3D1.0%20%3C2.0", want: 200},
		{name: "capabilities bad constraint", method: "GET", url: registry + "/v1/discovery/capabilities?version=not-semver", want: 400},
		{name: "capabilities unchanged", method: "GET", url: registry + "/v1/discovery/capabilities", prepare: current, want: 304},
		{name: "capabilities long poll", method: "GET", url: registry + "/v1/discovery/capabilities?index=0&wait=50ms", prepare: current, want: 200},
		{name: "routes", method: "GET", url: registry + "/v1/discovery/routes", want: 200},
		{name: "health", method: "GET", url: registry + "/v1/discovery/health", want: 200},
		{name: "ack", method: "POST", url: registry + "/v1/discovery/ack", contentType: "application/json", body: ack, want: 200},
		{name: "eligibility", method: "GET", url: registry + "/v1/services/openapi-1/eligibility", want: 200},
		{name: "eligibility unknown", method: "GET", url: registry + "/v1/services/nobody/eligibility", want: 404},
		{name: "outcomes", method: "POST", url: registry + "/v1/outcomes", contentType: "application/json",
			body: `{"gateway_id":"openapi-gw","outcomes":[{"instance_id":"openapi-1","generation":3,"ok":10,"errors":0,"connect_failures":0}]}`, want: 200},
		{name: "outcomes invalid", method: "POST", url: registry + "/v1/outcomes", contentType: "application/json", body: `{"outcomes":[]}`, want: 400},
		{name: "timeline", method: "GET", url: registry + "/v1/eligibility/timeline", want: 200},
		{name: "metrics history", method: "GET", url: registry + "/v1/metrics/history", want: 200},
		{name: "metrics history bad parameter", method: "GET", url: registry + "/v1/metrics/history?window=2h", want: 400},
		{name: "timeline csv", method: "GET", url: registry + "/v1/eligibility/timeline?format=csv", want: 200},
		{name: "incidents", method: "GET", url: registry + "/v1/incidents?status=unresolved", want: 200},
		{name: "incidents bad status", method: "GET", url: registry + "/v1/incidents?status=maybe", want: 400},
		// a fresh dev stack has no incident (its start-up panic lasts less than a minute); the
		// 200 answers are exercised by internal/server's security test and the dashboard's
		{name: "acknowledge unknown incident", method: "POST", url: registry + "/v1/incidents/998/acknowledge", want: 404},
		{name: "resolve unknown incident", method: "POST", url: registry + "/v1/incidents/999/resolve", want: 404},
		{name: "ignore unknown incident", method: "POST", url: registry + "/v1/incidents/997/ignore", contentType: "application/json", body: `{"comment":"known"}`, want: 404},
		{name: "acknowledge incidents unknown", method: "POST", url: registry + "/v1/incidents/acknowledge", contentType: "application/json", body: `{"ids":["996"]}`, want: 404},
		{name: "acknowledge incidents none", method: "POST", url: registry + "/v1/incidents/acknowledge", contentType: "application/json", body: `{"ids":[]}`, want: 400},
		{name: "events", method: "GET", url: registry + "/v1/events?type=instance.registered&limit=5", want: 200},
		{name: "events since", method: "GET", url: registry + "/v1/events?since=0&subject=openapi-*&q=OPENAPI&wait=50ms", want: 200},
		{name: "events csv", method: "GET", url: registry + "/v1/events?format=csv&severity=info", want: 200},
		{name: "events window", method: "GET", url: registry + "/v1/events?from=2026-01-01T00:00:00Z&until=2099-01-01T00:00:00Z", want: 200},
		{name: "report", method: "POST", url: registry + "/v1/reports", contentType: "application/json",
			body: `{"reporter":"openapi-gw","events":[{"type":"route.conflict","severity":"warning","subject":"GET /x","message":"GET /x is claimed twice"}],"conditions":[{"kind":"route","subject":"GET /x","active":false}]}`, want: 200},
		{name: "report invalid", method: "POST", url: registry + "/v1/reports", contentType: "application/json", body: `{"reporter":"x","events":[{"type":"instance.registered"}]}`, want: 400},
		{name: "events unknown type", method: "GET", url: registry + "/v1/events?type=instance.exploded", want: 400},
		{name: "evacuate an unknown zone", method: "POST", url: registry + "/v1/admin/evacuations", contentType: "application/json",
			body: `{"zone":"nowhere","duration":"1h","reason":"openapi"}`, want: 404},
		{name: "evacuations", method: "GET", url: registry + "/v1/admin/evacuations", want: 200},
		{name: "evacuation unknown", method: "GET", url: registry + "/v1/admin/evacuations/ev-nope", want: 404},
		{name: "extend unknown evacuation", method: "PATCH", url: registry + "/v1/admin/evacuations/ev-nope", contentType: "application/json", body: `{"duration":"1h"}`, want: 404},
		{name: "end unknown evacuation", method: "DELETE", url: registry + "/v1/admin/evacuations/ev-nope", want: 404},
		{name: "release an instance with nothing to release", method: "POST", url: registry + "/v1/admin/overrides", contentType: "application/json",
			body: `{"instance_id":"openapi-1","action":"release","reason":"openapi"}`, want: 409},
		{name: "an override with a misspelt field", method: "POST", url: registry + "/v1/admin/overrides", contentType: "application/json",
			body: `{"instance_id":"openapi-1","action":"withdraw","duration":"1h","reason":"openapi","froce":true}`, want: 400},
		{name: "override an unknown instance", method: "POST", url: registry + "/v1/admin/overrides", contentType: "application/json",
			body: `{"instance_id":"nobody","action":"withdraw","duration":"1h","reason":"openapi"}`, want: 404},
		{name: "overrides", method: "GET", url: registry + "/v1/admin/overrides", want: 200},
		{name: "end unknown override", method: "DELETE", url: registry + "/v1/admin/overrides/ov-nope", want: 404},
		{name: "deregister old generation", method: "DELETE", url: registry + "/v1/services/openapi-1?generation=1", want: 410},
		{name: "deregister", method: "DELETE", url: registry + "/v1/services/openapi-1?generation=3", want: 204},
		{name: "withdrawal", method: "GET", url: registry + "/v1/services/openapi-1/withdrawal?generation=3", want: 200},
		{name: "snapshot without a dir", method: "POST", url: registry + "/v1/admin/snapshot", want: 409},
		{name: "healthz", method: "GET", url: registry + "/healthz", want: 200},
		{name: "metrics", method: "GET", url: registry + "/metrics", want: 200},
		{name: "provider validate", method: "POST", url: jms + "/v1/capabilities/messaging.publish/validate", contentType: "application/json",
			body: `{"workflow_name":"w","step_id":"s","step_version":"1","capability_version":"1.0.0","step":{"type":"service_call","request":{"destination":"orders.events"}}}`, want: 200},
		{name: "provider validate unknown capability", method: "POST", url: jms + "/v1/capabilities/nothing.here/validate", contentType: "application/json",
			body: `{"step":{"type":"service_call"}}`, want: 404},
		{name: "example publish", method: "POST", url: jms + "/api/messaging/jms/publish", contentType: "application/json",
			body: `{"destination":"orders.events","payload":{"id":1},"headers":{"k":"v"}}`, want: 202},
		{name: "example publish without destination", method: "POST", url: jms + "/api/messaging/jms/publish", contentType: "application/json", body: `{}`, want: 400},
		{name: "example messages", method: "GET", url: jms + "/api/messaging/jms/messages?destination=orders.events", want: 200},
		{name: "provider invoke", method: "POST", url: jms + "/v1/capabilities/messaging.publish/invoke", contentType: "application/json",
			body: `{"workflow_name":"w","run_id":"r","step_id":"s","step_version":"1","request":{"destination":"orders.events"},"payload":{"id":1}}`, want: 200},
		{name: "readyz", method: "GET", url: registry + "/readyz", want: 200},
		{name: "gateway routes", method: "GET", url: gateway + "/v1/gateway/routes", want: 200},
		{name: "gateway route health", method: "GET", url: gateway + "/v1/gateway/routes/health", want: 200},
		{name: "gateway route health csv", method: "GET", url: gateway + "/v1/gateway/routes/health?format=csv", want: 200},
		{name: "gateway invalidate", method: "DELETE", url: gateway + "/v1/discovery/invalidate", want: 200},
		{name: "gateway invalidate (GET)", method: "GET", url: gateway + "/v1/discovery/invalidate", want: 200},
		{name: "orchestrator invalidate", method: "DELETE", url: orchestrator + "/v1/discovery/invalidate", want: 200},
		{name: "upload", method: "POST", url: orchestrator + "/v1/workflows", contentType: "application/yaml", body: copyYAML, want: 201},
		{name: "upload blocked", method: "POST", url: orchestrator + "/v1/workflows", contentType: "application/yaml", body: "name: broken\n", want: 422},
		{name: "list", method: "GET", url: orchestrator + "/v1/workflows", want: 200},
		{name: "get", method: "GET", url: orchestrator + "/v1/workflows/openapi-copy", want: 200},
		{name: "get unknown", method: "GET", url: orchestrator + "/v1/workflows/nothing", want: 404},
		{name: "validation", method: "GET", url: orchestrator + "/v1/workflows/openapi-copy/validation", want: 200},
		{name: "revalidate", method: "POST", url: orchestrator + "/v1/workflows/openapi-copy/validate", want: 200},
		{name: "run unpublished", method: "POST", url: orchestrator + "/v1/workflows/openapi-copy/run", contentType: "application/json", body: `{"order":1}`, want: 400},
		{name: "publish", method: "POST", url: orchestrator + "/v1/workflows/openapi-copy/publish", want: 200},
		{name: "run", method: "POST", url: orchestrator + "/v1/workflows/openapi-copy/run", contentType: "application/json", body: `{"order":1}`, want: 200},
		{name: "runs", method: "GET", url: orchestrator + "/v1/workflows/openapi-copy/runs", want: 200},
		{name: "trigger health", method: "GET", url: orchestrator + "/v1/triggers/health", want: 200},
		{name: "trigger health csv", method: "GET", url: orchestrator + "/v1/triggers/health?format=csv", want: 200},
		{name: "run unknown", method: "GET", url: orchestrator + "/v1/workflows/openapi-copy/runs/run-none", want: 404},
		{name: "delete", method: "DELETE", url: orchestrator + "/v1/workflows/openapi-copy", want: 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			newReq := func() *http.Request {
				req, err := http.NewRequestWithContext(ctx, c.method, c.url, strings.NewReader(c.body))
				if err != nil {
					t.Fatal(err)
				}
				if c.contentType != "" {
					req.Header.Set("Content-Type", c.contentType)
				}
				return req
			}
			req := newReq()
			if c.prepare != nil {
				c.prepare(req)
			}
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatalf("%s %s is not in docs/openapi.yaml: %v", c.method, req.URL.Path, err)
			}
			covered[route.Operation.OperationID] = true
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
			if err := openapi3filter.ValidateRequest(ctx, in); err != nil && c.want < 400 {
				t.Errorf("the request does not match the document: %v", err)
			}
			resp, err := http.DefaultClient.Do(req.Clone(ctx))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
				Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
			if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
				t.Errorf("the response does not match the document: %v\n%s", err, body)
			}
		})
	}
	var missing []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if !covered[op.OperationID] {
				missing = append(missing, op.OperationID)
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("operations of docs/openapi.yaml no request exercised: %v", missing)
	}
}
