package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

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
	if _, err := SetupTracing(context.Background(), "v"); err == nil {
		t.Fatal("an unknown OTLP protocol was accepted")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("BRIDGE_TRACE_PROPAGATE_UNSAMPLED", "sometimes")
	if _, err := SetupTracing(context.Background(), "v"); err == nil || !strings.Contains(err.Error(), `BRIDGE_TRACE_PROPAGATE_UNSAMPLED "sometimes"`) {
		t.Fatalf("BRIDGE_TRACE_PROPAGATE_UNSAMPLED=sometimes: error %v", err)
	}
	t.Setenv("BRIDGE_TRACE_PROPAGATE_UNSAMPLED", "true")
	tr, err := SetupTracing(context.Background(), "v")
	if err != nil || !tr.propagateUnsampled {
		t.Fatalf("BRIDGE_TRACE_PROPAGATE_UNSAMPLED=true: %+v, %v", tr, err)
	}
	_ = tr.Shutdown(context.Background())
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
