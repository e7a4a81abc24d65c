package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/report"
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

// failureReportEvery spaces the journal's reports of failed requests of one route.
const failureReportEvery = 10 * time.Second

// failureReports tells the registry's journal about traced requests that failed, at most one
// per route every failureReportEvery, each with its trace (the console links it).
type failureReports struct {
	reporter *report.Reporter
	gateway  string
	now      func() time.Time
	mu       sync.Mutex
	last     map[string]time.Time // route -> when its last failure was reported
}

func (f *failureReports) failed(tr *traced, instance string, status int, why string) {
	if f.reporter == nil {
		return
	}
	now := f.now()
	f.mu.Lock()
	if now.Sub(f.last[tr.name]) < failureReportEvery {
		f.mu.Unlock()
		return
	}
	f.last[tr.name] = now
	f.mu.Unlock()
	f.reporter.Event(apiv1.ReportedEvent{Type: apiv1.EventRouteRequestFailed, Severity: apiv1.SeverityError, Subject: tr.name,
		Message: fmt.Sprintf("a request of %s failed at gateway %s: %s", tr.name, f.gateway, why),
		Attrs:   map[string]any{"gateway": f.gateway, "trace_id": tr.span.SpanContext().TraceID().String(), "status": status, "instance_id": instance}})
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
		if !connectFailure(err) || i == 1 || !t.retry { // a refused first attempt is retried: not the request's failure yet
			p.failures.failed(t.traced, u.instance, http.StatusBadGateway, "the upstream "+u.instance+" did not answer: "+err.Error())
		}
	default:
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		t.traced.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode), attribute.String("meshflows.served_by", u.instance))
		if resp.StatusCode >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
			t.traced.span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
			p.failures.failed(t.traced, u.instance, resp.StatusCode, fmt.Sprintf("%s answered %d", u.instance, resp.StatusCode))
		}
	}
	return resp, err
}
