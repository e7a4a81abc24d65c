package orchestrator

import (
	"context"
	"encoding/json"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/workflow"
)

// tracedInvoke is invoke in a client span of the service_call when tracing is on.
func (o *Orchestrator) tracedInvoke(ctx context.Context, st *workflow.Step, c candidate, req *apiv1.InvokeRequest) (json.RawMessage, error) {
	if !o.cfg.Tracing.On() {
		return o.invoke(ctx, st, c, req)
	}
	ctx, span := o.cfg.Tracing.Tracer.Start(ctx, "service_call "+st.Capability.ID, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("meshflows.capability_id", st.Capability.ID), attribute.String("meshflows.instance_id", c.instance),
		attribute.String("server.address", c.endpoint), attribute.String("meshflows.step_id", st.ID)))
	defer span.End()
	out, err := o.invoke(ctx, st, c, req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return out, err
}

// propagating writes the trace of a request's context into its headers (traceparent).
type propagating struct {
	next       http.RoundTripper
	propagator propagation.TextMapPropagator
}

func (p *propagating) RoundTrip(req *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return next.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	p.propagator.Inject(req.Context(), propagation.HeaderCarrier(out.Header))
	return next.RoundTrip(out)
}

// runAttrs are a failed run's event attributes: its id, trigger, status and, when traced,
// its trace (the console links it).
func runAttrs(run *apiv1.Run) map[string]any {
	a := map[string]any{"run_id": run.RunID, "trigger": run.Trigger, "status": run.Status}
	if run.TraceID != "" {
		a["trace_id"] = run.TraceID
	}
	return a
}
