package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// MaxCapabilityBody limits the bodies of validate and invoke requests.
const MaxCapabilityBody = 1 << 20

// ValidateFunc checks a workflow step for a capability. Diagnostics of severity error make
// the step invalid; warnings do not. An error it returns is a failure to validate, not a
// verdict: return an *apiv1.Error to choose the status.
type ValidateFunc func(ctx context.Context, req *apiv1.ValidateRequest) ([]apiv1.Diagnostic, error)

// InvokeFunc performs a capability and returns its output, which is encoded as JSON. Return
// an *apiv1.Error to answer with its status and code (400 for a bad request, say).
type InvokeFunc func(ctx context.Context, req *apiv1.InvokeRequest) (any, error)

// Capability is what a provider serves for one capability id.
type Capability struct {
	ID       string
	Validate ValidateFunc // nil: validation is not supported (404)
	Invoke   InvokeFunc   // nil: invocation is not supported (404)
}

// NewHandler serves POST /v1/capabilities/{capability_id}/validate and /invoke for caps,
// with docs/reference/api.md's bodies and error body. Mount it on the provider's mux at "/v1/capabilities/".
func NewHandler(caps ...Capability) http.Handler {
	byID := make(map[string]Capability, len(caps))
	for _, c := range caps {
		byID[c.ID] = c
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/capabilities/{capability_id}/validate", func(w http.ResponseWriter, r *http.Request) {
		c, ok := byID[r.PathValue("capability_id")]
		if !ok || c.Validate == nil {
			httpapi.WriteError(w, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "capability %q has no validate endpoint here", r.PathValue("capability_id")))
			return
		}
		var req apiv1.ValidateRequest
		if err := decode(w, r, &req); err != nil {
			httpapi.WriteError(w, err)
			return
		}
		diags, err := c.Validate(r.Context(), &req)
		if err != nil {
			httpapi.WriteError(w, err)
			return
		}
		resp := apiv1.ValidateResponse{Valid: true, Diagnostics: []apiv1.Diagnostic{}}
		for _, d := range diags {
			if d.Severity == apiv1.SeverityError {
				resp.Valid = false
			}
			resp.Diagnostics = append(resp.Diagnostics, d)
		}
		httpapi.WriteJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("POST /v1/capabilities/{capability_id}/invoke", func(w http.ResponseWriter, r *http.Request) {
		c, ok := byID[r.PathValue("capability_id")]
		if !ok || c.Invoke == nil {
			httpapi.WriteError(w, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "capability %q has no invoke endpoint here", r.PathValue("capability_id")))
			return
		}
		var req apiv1.InvokeRequest
		if err := decode(w, r, &req); err != nil {
			httpapi.WriteError(w, err)
			return
		}
		out, err := c.Invoke(r.Context(), &req)
		if err != nil {
			httpapi.WriteError(w, err)
			return
		}
		raw, err := json.Marshal(out)
		if err != nil {
			httpapi.WriteError(w, fmt.Errorf("encode output: %w", err))
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, apiv1.InvokeResponse{Output: raw})
	})
	mux.HandleFunc(apiv1.PathCapabilityPrefix, func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCapabilityBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apiv1.Errorf(http.StatusRequestEntityTooLarge, apiv1.CodePayloadTooLarge, "body over %d bytes", mbe.Limit)
		}
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "read body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "body is not the expected JSON: %v", err)
	}
	return nil
}

// WriteJSON writes v as a JSON answer with status; providers use it for their own endpoints
// (httpapi.WriteJSON: the servers' own writer).
func WriteJSON(w http.ResponseWriter, status int, v any) { httpapi.WriteJSON(w, status, v) }

// WriteError writes err as the wire contract's error body: an *apiv1.Error with its status,
// anything else as 500 INTERNAL (httpapi.WriteError).
func WriteError(w http.ResponseWriter, err error) { httpapi.WriteError(w, err) }

// NotRouted answers a request that no pattern of mux takes, as every MeshFlows server does:
// 405 METHOD_NOT_ALLOWED with Allow, else 404 NOT_FOUND (httpapi.NotRouted).
func NotRouted(mux *http.ServeMux) http.HandlerFunc { return httpapi.NotRouted(mux) }
