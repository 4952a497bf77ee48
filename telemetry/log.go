package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a context that holds
// a span, so logs of a stream or record can be found from its trace and back.
type LogHandler struct{ slog.Handler }

// NewLogHandler wraps h.
func NewLogHandler(h slog.Handler) *LogHandler { return &LogHandler{h} }

func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *LogHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return &LogHandler{h.Handler.WithAttrs(a)}
}
func (h *LogHandler) WithGroup(n string) slog.Handler { return &LogHandler{h.Handler.WithGroup(n)} }
