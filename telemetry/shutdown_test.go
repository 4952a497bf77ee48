package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
)

// hungExporter is a collector that accepts and never answers: an export returns only
// when its ctx ends.
type hungExporter struct{ started chan struct{} }

func (e hungExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	select {
	case e.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (hungExporter) Shutdown(context.Context) error { return nil }

// Shutdown by a deadline with an export hung: it returns with the deadline's error and
// the batch processor's goroutine ends (goleak), whether the deadline has passed while
// exporting or before Shutdown was even called (the SDK then skips the processors; a
// bridge whose earlier shutdown steps used the whole deadline calls it so).
func TestShutdownCutsAHungExport(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(map[bool]string{false: "deadline while exporting", true: "deadline already passed"}[expired], func(t *testing.T) {
			defer goleak.VerifyNone(t)
			exp := hungExporter{started: make(chan struct{}, 1)}
			tr := newTracing("v", resource.NewSchemaless(), sdktrace.AlwaysSample(), bigSegments, nil, exp,
				sdktrace.WithBatchTimeout(time.Millisecond))
			_, span := tr.Tracer.Start(context.Background(), "s")
			span.End()
			select {
			case <-exp.started:
			case <-time.After(30 * time.Second):
				t.Fatal("the span was not exported in 30 s")
			}
			timeout := 200 * time.Millisecond
			if expired {
				timeout = 0
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := tr.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want the deadline's error", err)
			}
		})
	}
}
