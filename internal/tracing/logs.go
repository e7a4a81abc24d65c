package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a context inside a span
// (LogAttrs, InfoContext…), so that a log line leads to its trace.
func LogHandler(h slog.Handler) slog.Handler { return spanHandler{h} }

type spanHandler struct{ slog.Handler }

func (h spanHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h spanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return spanHandler{h.Handler.WithAttrs(as)}
}
func (h spanHandler) WithGroup(name string) slog.Handler {
	return spanHandler{h.Handler.WithGroup(name)}
}
