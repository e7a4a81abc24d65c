package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

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

// endSpan ends a span of the run's, with the error status when err is not nil.
type endSpan func(err error)

// noSpan is the end of a span never started (tracing off).
func noSpan(error) {}

// errNestedFailed is the status of an iteration's or a branch's span when one of its steps
// failed (the step's own span says which, and why).
var errNestedFailed = errors.New("a step failed")

func failedErr(failed bool) error {
	if failed {
		return errNestedFailed
	}
	return nil
}

// start starts a span of the run's; the callers check ex.tracer first, so that with tracing
// off nothing is built (no name, no attributes) on a path a loop runs a million times.
func (ex *executor) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, endSpan) {
	ctx, span := ex.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (ex *executor) stepSpan(ctx context.Context, st *workflow.Step) (context.Context, endSpan) {
	if ex.tracer == nil {
		return ctx, noSpan
	}
	return ex.start(ctx, "step "+st.ID, attribute.String("meshflows.step_id", st.ID), attribute.String("meshflows.step_type", string(st.Type)))
}

func (ex *executor) iterationSpan(ctx context.Context, st *workflow.Step, i int, mode workflow.Mode) (context.Context, endSpan) {
	if ex.tracer == nil {
		return ctx, noSpan
	}
	return ex.start(ctx, "iteration "+strconv.Itoa(i), attribute.String("meshflows.step_id", st.ID), attribute.Int("meshflows.iteration", i),
		attribute.String("meshflows.scope_mode", string(mode)))
}

func (ex *executor) branchSpan(ctx context.Context, st *workflow.Step, b *workflow.Branch, mode workflow.Mode) (context.Context, endSpan) {
	if ex.tracer == nil {
		return ctx, noSpan
	}
	return ex.start(ctx, "branch "+b.ID, attribute.String("meshflows.step_id", st.ID), attribute.String("meshflows.branch_id", b.ID),
		attribute.String("meshflows.scope_mode", string(mode)))
}
