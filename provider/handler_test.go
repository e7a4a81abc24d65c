package provider_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/provider"
)

func TestHandler(t *testing.T) {
	h := provider.NewHandler(provider.Capability{
		ID: "messaging.publish",
		Validate: func(_ context.Context, req *apiv1.ValidateRequest) ([]apiv1.Diagnostic, error) {
			switch req.StepID {
			case "warn":
				return []apiv1.Diagnostic{{Severity: "warning", Code: "W", Message: "hm", Path: "request.x"}}, nil
			case "bad":
				return []apiv1.Diagnostic{{Severity: "error", Code: "E", Message: "no"}}, nil
			}
			return nil, nil
		},
		Invoke: func(_ context.Context, req *apiv1.InvokeRequest) (any, error) {
			if string(req.Payload) == `"fail"` {
				return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "payload", Message: "fail"}})
			}
			return map[string]string{"echo": string(req.Payload)}, nil
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	tests := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"valid", "/v1/capabilities/messaging.publish/validate", `{"step_id":"ok"}`, 200, `{"valid":true,"diagnostics":[]}`},
		{"warning keeps it valid", "/v1/capabilities/messaging.publish/validate", `{"step_id":"warn"}`, 200,
			`{"valid":true,"diagnostics":[{"severity":"warning","code":"W","message":"hm","path":"request.x"}]}`},
		{"error makes it invalid", "/v1/capabilities/messaging.publish/validate", `{"step_id":"bad"}`, 200,
			`{"valid":false,"diagnostics":[{"severity":"error","code":"E","message":"no"}]}`},
		{"invoke", "/v1/capabilities/messaging.publish/invoke", `{"payload":1}`, 200, `{"output":{"echo":"1"}}`},
		{"invoke refused", "/v1/capabilities/messaging.publish/invoke", `{"payload":"fail"}`, 400, `INVALID_REQUEST`},
		{"bad json", "/v1/capabilities/messaging.publish/invoke", `{`, 400, `INVALID_JSON`},
		{"unknown capability", "/v1/capabilities/other.thing/invoke", `{}`, 404, `NOT_FOUND`},
		{"unknown path", "/v1/capabilities/messaging.publish/explode", `{}`, 404, `NOT_FOUND`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
				t.Errorf("POST %s = %d %s, want %d containing %s", tt.path, resp.StatusCode, b, tt.status, tt.want)
			}
			if !json.Valid(b) {
				t.Errorf("answer is not JSON: %s", b)
			}
		})
	}
}
