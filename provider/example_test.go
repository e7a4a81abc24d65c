package provider_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/provider"
)

func ExampleNewHandler() {
	h := provider.NewHandler(provider.Capability{
		ID: "webhook.send",
		Validate: func(_ context.Context, req *apiv1.ValidateRequest) ([]apiv1.Diagnostic, error) {
			if !strings.Contains(string(req.Step.Request), `"url"`) {
				return []apiv1.Diagnostic{{Severity: apiv1.SeverityError, Code: "URL_REQUIRED", Message: "a url is required", Path: "request.url"}}, nil
			}
			return nil, nil
		},
		Invoke: func(_ context.Context, req *apiv1.InvokeRequest) (any, error) {
			return map[string]int{"status": 200}, nil
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, call := range []struct{ path, body string }{
		{"/v1/capabilities/webhook.send/validate", `{"step":{"type":"service_call","request":{}}}`},
		{"/v1/capabilities/webhook.send/invoke", `{"request":{"url":"http://example.test"}}`},
	} {
		resp, _ := http.Post(srv.URL+call.path, "application/json", strings.NewReader(call.body))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(b))
	}
	// Output:
	// 200 {"valid":false,"diagnostics":[{"severity":"error","code":"URL_REQUIRED","message":"a url is required","path":"request.url"}]}
	// 200 {"output":{"status":200}}
}
