package telemetry

import (
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSegmentsNextBesideSettled: a stream's reader counts records into its
// segment (Next) while its collector counts them settled (Settled), as ingress does:
// the two must not slow each other down (they touch different fields).
func BenchmarkSegmentsNextBesideSettled(b *testing.B) {
	tr, _ := testTracing(b, sdktrace.ParentBased(sdktrace.NeverSample()), bigSegments)
	s := tr.NewSegments("bench", trace.SpanContext{})
	defer s.Close()
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			s.Settled(1, 0)
		}
	}()
	for b.Loop() {
		s.Next(1024)
	}
	stop.Store(true)
	wg.Wait()
}
