package orchestrator

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// runAttrs are a failed run's event attributes: its id, trigger, status and, when traced,
// its trace (the console links it).
func runAttrs(run *apiv1.Run) map[string]any {
	a := map[string]any{"run_id": run.RunID, "trigger": run.Trigger, "status": run.Status}
	if run.TraceID != "" {
		a["trace_id"] = run.TraceID
	}
	return a
}

// failedTrace is the trace of run when it failed ("" otherwise, or untraced).
func failedTrace(run *apiv1.Run) string {
	if run.Status == apiv1.RunSucceeded {
		return ""
	}
	return run.TraceID
}
