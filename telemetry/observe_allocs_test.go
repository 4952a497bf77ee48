package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// TestSampledObservationsAllocateNothing: the ingress path observes a publish latency
// and a stage for every 8th record (and every one that finds its stream idle), tens of
// thousands a second at saturation; once its route's attributes are made, an
// observation allocates nothing (each allocated its options' slice: a quarter of an
// allocation per record, a third of the path's).
func TestSampledObservationsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, err := NewMetrics(Build{Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.PublishLatency("r", time.Millisecond, trace.SpanContext{})
	m.PublishStage("r", "queue", time.Millisecond)
	m.RecordsSettled("r", 200, 1, 100)
	for name, f := range map[string]func(){
		"PublishLatency": func() { m.PublishLatency("r", time.Millisecond, trace.SpanContext{}) },
		"PublishStage":   func() { m.PublishStage("r", "queue", time.Millisecond) },
		"RecordsSettled": func() { m.RecordsSettled("r", 200, 8, 800) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %.1f allocations per call, want 0", name, n)
		}
	}
}
