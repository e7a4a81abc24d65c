package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"go.opentelemetry.io/otel/propagation"
)

// MaxWorkflowBytes bounds an uploaded workflow.
const MaxWorkflowBytes = 1 << 20

// Handler serves the orchestrator API of docs/reference/api.md.
func (o *Orchestrator) Handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, perm string, h func(w http.ResponseWriter, r *http.Request) (int, any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if o.cfg.Authorizer != nil && perm != "" {
				id, err := o.cfg.Authorizer.Authorize(r, perm)
				if err != nil {
					writeErr(w, err)
					return
				}
				r = r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
			}
			status, v, err := h(w, r)
			if err != nil {
				writeErr(w, err)
				return
			}
			httpapi.WriteJSON(w, status, v)
		})
	}
	handle("POST /v1/workflows", auth.WorkflowsWrite, func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		src, err := readBody(w, r, "workflow")
		if err != nil {
			return 0, nil, err
		}
		res, err := o.Upload(r.Context(), src)
		return http.StatusCreated, res, err
	})
	handle("GET /v1/workflows", auth.WorkflowsRead, func(http.ResponseWriter, *http.Request) (int, any, error) {
		return http.StatusOK, apiv1.WorkflowList{Workflows: o.List()}, nil
	})
	handle("GET /v1/workflows/{name}", auth.WorkflowsRead, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		d, err := o.Get(r.PathValue("name"))
		return http.StatusOK, d, err
	})
	handle("GET /v1/workflows/{name}/validation", auth.WorkflowsRead, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		v, err := o.Validation(r.PathValue("name"))
		return http.StatusOK, v, err
	})
	handle("POST /v1/workflows/{name}/validate", auth.WorkflowsWrite, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		v, err := o.Revalidate(r.Context(), r.PathValue("name"))
		return http.StatusOK, v, err
	})
	handle("POST /v1/workflows/{name}/publish", auth.WorkflowsWrite, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		v, err := o.Publish(r.PathValue("name"))
		return http.StatusOK, v, err
	})
	handle("POST /v1/workflows/{name}/run", auth.WorkflowsRun, func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		input, err := readBody(w, r, "input")
		if err != nil {
			return 0, nil, err
		}
		if len(input) > 0 && !json.Valid(input) {
			return 0, nil, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "the run input is not JSON")
		}
		ctx := r.Context()
		if o.cfg.Tracing.On() { // a caller's trace goes on into the run
			ctx = o.cfg.Tracing.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		run, err := o.RunNow(ctx, r.PathValue("name"), "http", input)
		return http.StatusOK, run, err
	})
	mux.HandleFunc("GET "+apiv1.PathTriggerHealth, func(w http.ResponseWriter, r *http.Request) {
		if o.cfg.Authorizer != nil {
			if _, err := o.cfg.Authorizer.Authorize(r, auth.WorkflowsRead); err != nil {
				writeErr(w, err)
				return
			}
		}
		h := o.TriggerHealth()
		switch f := r.URL.Query().Get("format"); f {
		case "", "json":
			httpapi.WriteJSON(w, http.StatusOK, h)
		case "csv":
			if err := writeTriggerCSV(w, h); err != nil {
				o.cfg.Logger.Warn("writing the trigger health CSV failed", "error", err)
			}
		default:
			writeErr(w, apiv1.InvalidRequest([]apiv1.Detail{{Path: "format", Message: "must be json or csv, got " + strconv.Quote(f)}}))
		}
	})
	handle("GET /v1/workflows/{name}/runs", auth.WorkflowsRead, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		h, err := o.Runs(r.PathValue("name"))
		return http.StatusOK, h, err
	})
	handle("POST /v1/workflows/{name}/runs/{run_id}/cancel", auth.WorkflowsRun, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		name, id := r.PathValue("name"), r.PathValue("run_id")
		who, _ := r.Context().Value(identityKey{}).(string)
		if who == "" {
			who = "an unauthenticated caller (open mode)"
		}
		err := o.Cancel(name, id, "by "+who)
		return http.StatusAccepted, map[string]any{"workflow": name, "run_id": id, "cancelled": true}, err
	})
	handle("GET /v1/workflows/{name}/runs/{run_id}", auth.WorkflowsRead, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		run, err := o.GetRun(r.PathValue("name"), r.PathValue("run_id"))
		return http.StatusOK, run, err
	})
	handle("DELETE /v1/workflows/{name}", auth.WorkflowsWrite, func(_ http.ResponseWriter, r *http.Request) (int, any, error) {
		name := r.PathValue("name")
		return http.StatusOK, map[string]any{"workflow": name, "deleted": true}, o.Delete(name)
	})
	invalidate := func(http.ResponseWriter, *http.Request) (int, any, error) {
		o.cfg.Discovery.Invalidate()
		return http.StatusOK, map[string]string{"status": "invalidated"}, nil
	}
	handle("GET /v1/discovery/invalidate", auth.WorkflowsWrite, invalidate)
	handle("DELETE /v1/discovery/invalidate", auth.WorkflowsWrite, invalidate)
	handle("GET /healthz", "", func(http.ResponseWriter, *http.Request) (int, any, error) {
		return http.StatusOK, map[string]string{"status": "ok"}, nil
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeErr(w, httpapi.RouteError(mux, r, w.Header())) })
	return mux
}

// BodyTimeout bounds reading a request body: a client that sends it slowly gets 408.
const BodyTimeout = 10 * time.Second

// readBody reads a request body of at most MaxWorkflowBytes within BodyTimeout (a deadline
// of its own, cleared after: the server's ReadTimeout would also end slow handlers):
// 413 over the limit, 408 too slow, 400 otherwise.
func readBody(w http.ResponseWriter, r *http.Request, what string) ([]byte, error) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(BodyTimeout)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWorkflowBytes))
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &mbe):
		return nil, apiv1.Errorf(http.StatusRequestEntityTooLarge, apiv1.CodePayloadTooLarge, "%s over %d bytes", what, MaxWorkflowBytes)
	case errors.As(err, &ne) && ne.Timeout():
		w.Header().Set("Connection", "close")
		return nil, apiv1.Errorf(http.StatusRequestTimeout, apiv1.CodeRequestTimeout, "the %s did not arrive within %s", what, BodyTimeout)
	default:
		return nil, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "read the %s: %v", what, err)
	}
}

// blockedBody is the 422 answer: the error body and the validation result.
type blockedBody struct {
	Error      *apiv1.Error            `json:"error"`
	Validation *apiv1.ValidationResult `json:"validation"`
}

// identityKey carries the caller's identity to a handler that records it.
type identityKey struct{}

func writeErr(w http.ResponseWriter, err error) {
	var ae *apiv1.Error
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ae.RetryAfter))
	}
	var be *BlockedError
	if errors.As(err, &be) {
		e := apiv1.Errorf(http.StatusUnprocessableEntity, apiv1.CodeValidationFailed, "workflow blocked: %s", be.Reason)
		for _, s := range be.Result.Steps {
			for _, d := range append(s.Contract.Diagnostics, s.Provider.Diagnostics...) {
				if d.Severity == apiv1.SeverityError {
					e.Details = append(e.Details, apiv1.Detail{Path: d.Path, Message: fmt.Sprintf("%d:%d: %s: %s", d.Line, d.Column, d.Code, d.Message)})
				}
			}
		}
		for _, d := range be.Result.Diagnostics {
			if d.Severity == apiv1.SeverityError {
				e.Details = append(e.Details, apiv1.Detail{Path: d.Path, Message: fmt.Sprintf("%d:%d: %s: %s", d.Line, d.Column, d.Code, d.Message)})
			}
		}
		httpapi.WriteJSON(w, e.Status, blockedBody{Error: e, Validation: be.Result})
		return
	}
	httpapi.WriteError(w, err)
}
