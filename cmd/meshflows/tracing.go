package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/tracing"
)

// bindOTLP adds --otlp-endpoint.
func bindOTLP(fs *pflag.FlagSet, endpoint *string) {
	fs.StringVar(endpoint, "otlp-endpoint", "", "OpenTelemetry collector (OTLP/HTTP) to send traces to, like http://127.0.0.1:4318 (default: $OTEL_EXPORTER_OTLP_ENDPOINT or $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; neither: no tracing, at no cost); OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER apply")
}

// startTracing sets tracing up for component and, in g, flushes its spans when ctx ends.
func startTracing(ctx context.Context, g *errgroup.Group, endpoint, component string, logger *slog.Logger) (*tracing.Tracing, error) {
	tr, err := tracing.New(ctx, tracing.Config{Endpoint: endpoint, Component: component, Logger: logger})
	if err != nil || !tr.On() {
		return tr, err
	}
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			logger.Warn("tracing: the last spans were not exported", slog.String("component", component), slog.Any("error", err))
		}
		return nil
	})
	return tr, nil
}
