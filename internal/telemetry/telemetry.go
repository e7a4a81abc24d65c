// Package telemetry builds the slog loggers and Prometheus registries that cmd/meshflows
// injects into every component. Nothing here is global: each call returns a new value.
package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshflows/meshflows/internal/tracing"
)

// LogConfig says how a component logs.
type LogConfig struct {
	// Level is debug, info, warn or error (default info).
	Level string
	// Format is json (default, for servers) or text (for people at a terminal).
	Format string
}

// NewLogger returns a logger writing to w as cfg says.
func NewLogger(w io.Writer, cfg LogConfig) (*slog.Logger, error) {
	var level slog.Level
	if cfg.Level != "" {
		if err := level.UnmarshalText([]byte(cfg.Level)); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", cfg.Level)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	// a line logged inside a span carries its trace_id and span_id
	switch strings.ToLower(cfg.Format) {
	case "", "json":
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(tracing.LogHandler(slog.NewTextHandler(w, opts))), nil
	default:
		return nil, fmt.Errorf("log format %q: want json or text", cfg.Format)
	}
}

// NewRegistry returns a Prometheus registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
