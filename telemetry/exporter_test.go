package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/telemetry/internal/otlpwire"
)

// collector is an OTLP/HTTP collector keeping the spans it is sent.
func collector(t *testing.T) (url string, spans func() []*tracepb.Span) {
	var mu sync.Mutex
	var got []*tracepb.Span
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got = append(got, ss.Spans...)
			}
		}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/traces", func() []*tracepb.Span {
		mu.Lock()
		defer mu.Unlock()
		return append([]*tracepb.Span(nil), got...)
	}
}

// The record spans the bridge makes reach the collector, with their name, kind,
// attributes and link, through otlpwire's processor, and every span ended is counted
// exported.
func TestTheRecordSpansReachTheCollector(t *testing.T) {
	url, spans := collector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tr, err := SetupTracing(context.Background(), "v", TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if wireProcessor(tr) == nil {
		t.Fatalf("tracing runs %T, not otlpwire's processor", tr.processors)
	}
	segs := tr.NewSegments("POST r", trace.SpanContext{})
	var r RecordSpan
	tr.StartPublish(&r, trace.SpanContext{}, segs.Next(7), "persistent://public/default/t", 7, time.Now())
	tr.EndRecord(&r, "1:2:-1:0", nil)
	segs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var publish *tracepb.Span
	for _, s := range spans() {
		if s.Name == "publish persistent://public/default/t" {
			publish = s
		}
	}
	if publish == nil {
		t.Fatalf("no publish span among %d exported", len(spans()))
	}
	attrs := map[string]string{}
	for _, kv := range publish.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	sid := r.SpanContext().SpanID()
	if publish.Kind != tracepb.Span_SPAN_KIND_PRODUCER || len(publish.Links) != 1 || string(publish.SpanId) != string(sid[:]) ||
		!strings.Contains(attrs["messaging.message.id"], "1:2:-1:0") || !strings.Contains(attrs["messaging.system"], "pulsar") {
		t.Fatalf("publish span %v", publish)
	}
	if tr.Spans.Exported() < 2 || tr.Spans.Failed() != 0 || tr.Spans.Exported() != tr.Spans.Ended() {
		t.Fatalf("ended %d, exported %d, failed %d", tr.Spans.Ended(), tr.Spans.Exported(), tr.Spans.Failed())
	}
}

// A variable or value the exporter cannot use stops start-up and CheckTracing (so
// `bridge validate`), naming it.
func TestCheckTracingRefusesWhatStartUpRefuses(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")
	for _, err := range []error{CheckTracing(TracingOptions{}), setupErr(TracingOptions{})} {
		if !errors.Is(err, otlpwire.ErrConfig) || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") {
			t.Fatalf("error %v, want the variable named", err)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
	if err := CheckTracing(TracingOptions{}); err != nil {
		t.Fatalf("gzip: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")
	t.Setenv("OTEL_TRACES_EXPORTER", "none") // tracing off: nothing to check
	if err := CheckTracing(TracingOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setupErr(o TracingOptions) error {
	tr, err := SetupTracing(context.Background(), "v", o)
	if err == nil {
		_ = tr.Shutdown(context.Background())
	}
	return err
}

// otlpwire's processor batches as the SDK's batch span processor would: the
// OTEL_BSP_* variables (a bad value takes the default, as the SDK's), then the bridge's
// own options over them.
func TestBatchOptionsAreTheSDKs(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "7")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "not a number")
	o := batchOptions(nil)
	want := sdktrace.BatchSpanProcessorOptions{MaxQueueSize: 100, MaxExportBatchSize: 7, BatchTimeout: 250 * time.Millisecond,
		ExportTimeout: sdktrace.DefaultExportTimeout * time.Millisecond}
	if o != want {
		t.Fatalf("options %+v, want %+v", o, want)
	}
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1000") // past the queue: the SDK's default batch, within the queue
	if o := batchOptions([]sdktrace.BatchSpanProcessorOption{sdktrace.WithMaxQueueSize(16384)}); o.MaxExportBatchSize != 100 || o.MaxQueueSize != 16384 {
		t.Fatalf("options %+v", o)
	}
}
