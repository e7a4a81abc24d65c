package tracing_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshflows/meshflows/internal/tracing"
	"github.com/meshflows/meshflows/internal/tracing/otlptest"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestEnabled(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
		env      map[string]string
		want     bool
	}{
		{"nothing set: off", "", nil, false},
		{"the flag", "http://collector:4318", nil, true},
		{"the standard variable", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"the traces variable", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter none wins", "http://collector:4318", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"the SDK disabled", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tracing.Config{Endpoint: tt.endpoint, Getenv: env(tt.env)}
			if got := c.Enabled(); got != tt.want {
				t.Errorf("Enabled() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOffCostsNothingAndCarriesNoTracer(t *testing.T) {
	tr, err := tracing.New(context.Background(), tracing.Config{Component: "gateway", Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if tr.On() || tr.Tracer != nil || tr.Propagator == nil {
		t.Errorf("off: %+v", tr)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestSpansReachAnOTLPReceiver(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.URL, Component: "gateway", Getenv: env(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tr.Tracer.Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
	_, child := tr.Tracer.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindClient))
	child.End()
	parent.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Await(t, "two spans", func(s []otlptest.Span) bool { return len(s) == 2 })
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	p, c := byName["parent"], byName["child"]
	if p.Service != "meshflows-gateway" || p.Kind != "SERVER" || c.Kind != "CLIENT" || c.Parent != p.SpanID || c.TraceID != p.TraceID || p.Parent != "" {
		t.Errorf("spans:\n%s", otlptest.Dump(spans))
	}
}

func TestTheDefaultSamplerKeepsAFewHeartbeats(t *testing.T) {
	s := tracing.DefaultSampler()
	low := trace.TraceID{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	high := trace.TraceID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	sampledParent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: high, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	tests := []struct {
		name  string
		ctx   context.Context
		span  string
		id    trace.TraceID
		keeps bool
	}{
		{"a run starting a trace", context.Background(), "workflow.run", high, true},
		{"a heartbeat in the 1 %", context.Background(), tracing.HeartbeatSpan, low, true},
		{"a heartbeat out of it", context.Background(), tracing.HeartbeatSpan, high, false},
		{"a heartbeat whose caller samples", sampledParent, tracing.HeartbeatSpan, high, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: tt.ctx, TraceID: tt.id, Name: tt.span})
			if got := r.Decision == sdktrace.RecordAndSample; got != tt.keeps {
				t.Errorf("sampled %v, want %v", got, tt.keeps)
			}
		})
	}
}

func TestLogLinesInsideASpanCarryItsIDs(t *testing.T) {
	var b strings.Builder
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&b, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	logger.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "in a span")
	logger.With("k", "v").Info("outside")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"trace_id":"01000000000000000000000000000000","span_id":"0200000000000000"`) || strings.Contains(lines[1], "trace_id") {
		t.Errorf("lines:\n%s", b.String())
	}
}
