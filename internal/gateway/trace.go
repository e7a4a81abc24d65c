package gateway

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshflows/meshflows/routing"
)

// traced is what a traced request carries: its server span, the two upstreams it may go
// to (for their client spans) and the retries made.
type traced struct {
	span    trace.Span
	name    string
	picked  [2]*upstream
	retries int
}

func (tr *traced) end() {
	tr.span.SetAttributes(attribute.Int("meshflows.retries", tr.retries))
	tr.span.End()
}

// startServerSpan starts the server span of a request for route e, continuing the trace an
// incoming traceparent names: named by the route (method and pattern, never the raw path),
// with the chosen instance (a), its eligibility and weight and the table's source.
func (p *proxy) startServerSpan(w http.ResponseWriter, r *http.Request, e *routing.Entry, t *target, a, b *upstream) *http.Request {
	ctx := p.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	tr := &traced{name: e.Method + " " + e.Pattern, picked: [2]*upstream{a, b}}
	ctx, tr.span = p.tracer.Start(ctx, tr.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", e.Pattern),
		attribute.String("meshflows.route.source", e.Source),
		attribute.String("meshflows.service", e.Service),
		attribute.String("meshflows.instance_id", a.instance),
		attribute.String("meshflows.eligibility", a.eligibility),
		attribute.Int("meshflows.weight", a.weight),
		attribute.String("meshflows.cache_source", w.Header().Get("X-Cache-Source")),
	))
	t.traced = tr
	return r.WithContext(ctx)
}

// tracedAttempt sends req to upstream i in a client span, the trace propagated to it.
func (p *proxy) tracedAttempt(next http.RoundTripper, req *http.Request, t *target, i int) (*http.Response, error) {
	u := t.traced.picked[i]
	ctx, span := p.tracer.Start(req.Context(), t.traced.name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Host),
		attribute.String("meshflows.instance_id", u.instance),
		attribute.String("meshflows.eligibility", u.eligibility),
		attribute.Int("meshflows.weight", u.weight),
		attribute.Int("meshflows.attempt", i+1),
	))
	defer span.End()
	out := req.WithContext(ctx)
	out.Header = req.Header.Clone()
	p.propagator.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := next.RoundTrip(out)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		t.traced.span.SetStatus(codes.Error, "upstream failed")
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		t.traced.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode), attribute.String("meshflows.served_by", u.instance))
		if resp.StatusCode >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
			t.traced.span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
		}
	}
	return resp, err
}
