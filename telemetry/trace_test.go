package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestTracingIsOnlyOnWhenAsked(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"}, false},
	}
	for _, c := range cases {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
			t.Setenv(k, c.env[k])
		}
		if got := tracingWanted(); got != c.want {
			t.Errorf("%v: tracing %v, want %v", c.env, got, c.want)
		}
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := SetupTracing(context.Background(), "v", TracingOptions{}); err == nil {
		t.Fatal("an unknown OTLP protocol was accepted")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tr, err := SetupTracing(context.Background(), "v", TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Options(), (TracingOptions{SegmentRecords: 10000, SegmentInterval: time.Minute}); got != want {
		t.Fatalf("no options: tracing runs with %+v, want the defaults %+v", got, want)
	}
	_ = tr.Shutdown(context.Background())
	want := TracingOptions{SegmentRecords: 500, SegmentInterval: 30 * time.Second, PropagateUnsampled: true}
	if tr, err = SetupTracing(context.Background(), "v", want); err != nil {
		t.Fatal(err)
	}
	if got := tr.Options(); got != want {
		t.Fatalf("tracing runs with %+v, want %+v", got, want)
	}
	_ = tr.Shutdown(context.Background())
	for _, c := range []struct {
		o    TracingOptions
		want string
	}{
		{TracingOptions{SegmentRecords: -1}, "tracing.segmentRecords: -1"},
		{TracingOptions{SegmentInterval: -time.Second}, "tracing.segmentInterval: -1s"},
	} {
		if _, err := SetupTracing(context.Background(), "v", c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}

func TestPropertiesCarryTheTraceContextAndLogsItsIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "publish")
	props := PropertiesCarrier{}
	propagation.TraceContext{}.Inject(ctx, props)
	if len(props["traceparent"]) != 55 {
		t.Fatalf("traceparent %q", props["traceparent"])
	}
	back := propagation.TraceContext{}.Extract(context.Background(), props)
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil)))
	log.InfoContext(back, "record published")
	var rec map[string]string
	_ = json.Unmarshal(buf.Bytes(), &rec)
	if rec["trace_id"] != span.SpanContext().TraceID().String() || rec["span_id"] != span.SpanContext().SpanID().String() {
		t.Fatalf("log %s lacks the span's ids", buf.String())
	}
	span.End()
}
