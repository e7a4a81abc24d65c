package httpapi

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traced serves h in a server span of tracer, continuing the trace a W3C traceparent header
// names (a provider's handler continues the gateway's or the orchestrator's call). The span
// is named name when it is not empty, else by the pattern of the ServeMux route that served
// the request ("POST /api/messaging/jms/publish"), never by the raw path. GET /healthz and
// GET /metrics (probes and scrapes, every few seconds) are served without a span. A nil
// tracer returns h itself: nothing is traced and nothing costs.
func Traced(tracer trace.Tracer, name string, h http.Handler) http.Handler {
	if tracer == nil {
		return h
	}
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/metrics") {
			h.ServeHTTP(w, r)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		spanName := name
		if spanName == "" {
			spanName = r.Method
		}
		ctx, span := tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		h.ServeHTTP(sw, r)
		if name == "" && r.Pattern != "" {
			span.SetName(r.Pattern)
		}
		if r.Pattern != "" {
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(sw.status))
		}
	})
}

// statusWriter notes the status a handler answers; Unwrap lets http.ResponseController
// reach the connection underneath (flushes, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
