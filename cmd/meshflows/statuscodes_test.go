package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// TestEveryServerAnswersTheStatusUsersRelyOn drives every server of 'meshflows dev': an
// unknown method on a known path is 405 with Allow, an unknown path 404, both with the error
// body; a body over the provider's limit through the gateway is 413; the dashboard passes an
// orchestrator's 404 on as 404.
func TestEveryServerAnswersTheStatusUsersRelyOn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startDev(t, ctx)
	defer func() { cancel(); <-done }()
	waitDevReady(t, base)
	url := func(offset int, path string) string { return "http://127.0.0.1:" + strconv.Itoa(base+offset) + path }
	tests := []struct {
		name, method, url, body string
		status                  int
		code, allow             string
	}{
		{"registry: method", "PUT", url(devRegistryOffset, "/v1/discovery/capabilities"), "", 405, apiv1.CodeMethodNotAllowed, "GET, HEAD"},
		{"registry: path", "GET", url(devRegistryOffset, "/v1/nope"), "", 404, apiv1.CodeNotFound, ""},
		{"orchestrator: method", "DELETE", url(devOrchestratorOffset, "/v1/workflows"), "", 405, apiv1.CodeMethodNotAllowed, "GET, HEAD, POST"},
		{"orchestrator: path", "GET", url(devOrchestratorOffset, "/v1/nope"), "", 404, apiv1.CodeNotFound, ""},
		{"gateway admin: method", "PUT", url(devGatewayOffset, "/v1/gateway/routes"), "", 405, apiv1.CodeMethodNotAllowed, "GET, HEAD"},
		{"gateway: path", "GET", url(devGatewayOffset, "/nope"), "", 404, apiv1.CodeNotFound, ""},
		{"dashboard: method", "DELETE", url(devDashboardOffset, "/workflows"), "", 405, apiv1.CodeMethodNotAllowed, "GET, HEAD"},
		{"dashboard: path", "GET", url(devDashboardOffset, "/nope"), "", 404, apiv1.CodeNotFound, ""},
		{"example provider: method", "GET", url(devProviderOffsetJMS, "/api/messaging/jms/publish"), "", 405, apiv1.CodeMethodNotAllowed, "POST"},
		{"example provider: path", "GET", url(devProviderOffsetJMS, "/nope"), "", 404, apiv1.CodeNotFound, ""},
		{"through the gateway: body over the provider's limit", "POST", url(devGatewayOffset, "/api/messaging/jms/publish"),
			`{"destination":"d","payload":"` + strings.Repeat("x", 2<<20) + `"}`, 413, apiv1.CodePayloadTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var eb apiv1.ErrorBody
			json.Unmarshal(raw, &eb)
			if resp.StatusCode != tt.status || eb.Error == nil || eb.Error.Code != tt.code || resp.Header.Get("Allow") != tt.allow {
				t.Errorf("%s %s = %d %q (Allow %q), want %d %s (Allow %q)", tt.method, tt.url, resp.StatusCode, raw, resp.Header.Get("Allow"), tt.status, tt.code, tt.allow)
			}
		})
	}
	resp, err := http.Get(url(devDashboardOffset, "/validation/no-such-workflow/export"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("dashboard export of a workflow the orchestrator does not have: %d, want 404", resp.StatusCode)
	}
}
