// Package tracing sets up OpenTelemetry traces for a MeshFlows server: an OTLP/HTTP exporter
// when an endpoint is configured (--otlp-endpoint, or the standard OTEL_EXPORTER_OTLP_*
// variables), nothing at all otherwise, and W3C Trace Context propagation. Components take
// the Tracer it returns; a nil Tracer means tracing is off, and instrumented code then does
// no work at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config configures tracing for one component.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL (http://collector:4318): spans go to
	// Endpoint/v1/traces. Empty: the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT variable, and with neither set tracing is off.
	Endpoint string
	// Component names the server (gateway, orchestrator, registry…): the service.name of its
	// spans is meshflows-COMPONENT unless OTEL_SERVICE_NAME says otherwise.
	Component string
	// Getenv reads the environment (default os.Getenv; tests set their own).
	Getenv func(string) string
	Logger *slog.Logger
}

// Tracing is what a component traces with: a Tracer (nil when off) and the propagator.
type Tracing struct {
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	provider   *sdktrace.TracerProvider
}

// Propagator is the W3C Trace Context (traceparent, tracestate) propagator every component
// uses, on or off: an incoming trace is carried on even by a component that exports nothing.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Off is tracing turned off: a nil Tracer, the propagator still set.
var Off = &Tracing{Propagator: Propagator}

// Enabled reports whether cfg turns tracing on.
func (c *Config) Enabled() bool {
	getenv := c.getenv()
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return c.Endpoint != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func (c *Config) getenv() func(string) string {
	if c.Getenv != nil {
		return c.Getenv
	}
	return os.Getenv
}

// New sets tracing up as cfg says: Off when no endpoint is configured.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if !cfg.Enabled() {
		return Off, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	getenv := cfg.getenv()
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "meshflows-"+cfg.Component)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if getenv("OTEL_TRACES_SAMPLER") == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(DefaultSampler()))
	} // else the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG itself
	tp := sdktrace.NewTracerProvider(tpOpts...)
	where := cfg.Endpoint
	if where == "" {
		where = "the OTEL_EXPORTER_OTLP_* endpoint"
	}
	cfg.Logger.Info("tracing: exporting spans over OTLP/HTTP", slog.String("endpoint", where))
	return &Tracing{Tracer: tp.Tracer("github.com/meshflows/meshflows/" + cfg.Component), Propagator: Propagator, provider: tp}, nil
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// On reports whether t exports spans.
func (t *Tracing) On() bool { return t != nil && t.Tracer != nil }

// HeartbeatSpan is the name of the registry's heartbeat spans, which DefaultSampler samples
// at HeartbeatRatio when they start a trace.
const HeartbeatSpan = "registry.heartbeat"

// HeartbeatRatio is the share of heartbeat traces kept: every provider heartbeats every few
// seconds, and a trace of each would drown the rest.
const HeartbeatRatio = 0.01

// DefaultSampler follows the parent's decision; a trace that starts here is kept, but for a
// heartbeat's, kept at HeartbeatRatio.
func DefaultSampler() sdktrace.Sampler {
	return sdktrace.ParentBased(rootSampler{all: sdktrace.AlwaysSample(), heartbeats: sdktrace.TraceIDRatioBased(HeartbeatRatio)})
}

type rootSampler struct{ all, heartbeats sdktrace.Sampler }

func (s rootSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == HeartbeatSpan {
		return s.heartbeats.ShouldSample(p)
	}
	return s.all.ShouldSample(p)
}

func (s rootSampler) Description() string {
	return fmt.Sprintf("MeshFlowsRoot{heartbeats:%s,others:%s}", s.heartbeats.Description(), s.all.Description())
}

// Transport sends requests through next (http.DefaultTransport when nil) with the trace of
// their context in their headers (traceparent, tracestate), when they have one.
func Transport(next http.RoundTripper) http.RoundTripper { return &propagating{next: next} }

type propagating struct{ next http.RoundTripper }

func (p *propagating) RoundTrip(req *http.Request) (*http.Response, error) {
	next := p.next
	if next == nil {
		next = http.DefaultTransport
	}
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return next.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	Propagator.Inject(req.Context(), propagation.HeaderCarrier(out.Header))
	return next.RoundTrip(out)
}
