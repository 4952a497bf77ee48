package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/telemetry/internal/otlpwire"
)

// metricSeries reads one series' value from a /metrics exposition (-1: absent).
func metricSeries(t *testing.T, body, series string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDroppedAndRejectedSpansAreOnMetrics: spans otlpwire's processor drops because its queue is full, and
// spans a collector rejects in a partial success, show on /metrics
// (bridge_trace_spans_total{result="dropped"}, bridge_trace_spans_rejected_total), with
// the processor's and the exporter's own counts. Before, Processor.Dropped and
// Exporter.Rejected were counted and never shown: a full queue or a collector refusing
// spans were invisible but for the gap between ended and exported.
func TestDroppedAndRejectedSpansAreOnMetrics(t *testing.T) {
	arrived := make(chan struct{}, 100)
	release := make(chan struct{})
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		requests.Add(1)
		arrived <- struct{}{}
		<-release // the collector is slow: the spans ended meanwhile wait, then are dropped
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{
			RejectedSpans: 1, ErrorMessage: "the test's collector takes no more"}})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
	tr, err := SetupTracing(context.Background(), "v", TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(Build{Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if err := m.ObserveSpans(tr.Spans); err != nil {
		t.Fatal(err)
	}
	span := func(i int) {
		var r RecordSpan
		tr.StartPublish(&r, trace.SpanContext{}, trace.SpanContext{}, "persistent://public/default/t", int64(i), time.Now())
		tr.EndRecord(&r, "1:2:-1:0", nil)
	}
	span(0)
	select { // its request is under way: the queue (1 span) fills, the rest is dropped
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first span's request never reached the collector")
	}
	for i := 1; i <= 10; i++ {
		span(i)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	proc := wireProcessor(tr)
	if proc == nil {
		t.Fatalf("tracing runs %T, not otlpwire's processor", tr.processors)
	}
	dropped := proc.Dropped()
	body := scrape()
	if got := metricSeries(t, body, `bridge_trace_spans_total{result="dropped"}`); dropped < 9 || got != dropped {
		t.Fatalf(`bridge_trace_spans_total{result="dropped"} %d; the processor dropped %d of 10 spans ended behind a full queue of 1:`+"\n%s", got, dropped, body)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	body = scrape()
	if got := metricSeries(t, body, `bridge_trace_spans_rejected_total`); got != requests.Load() {
		t.Fatalf("bridge_trace_spans_rejected_total %d; the collector rejected one span in each of its %d requests:\n%s",
			got, requests.Load(), body)
	}
}

// wireProcessor is otlpwire's processor among tr's, or nil.
func wireProcessor(tr *Tracing) *otlpwire.Processor {
	for _, p := range tr.processors {
		if w, ok := p.(*otlpwire.Processor); ok {
			return w
		}
	}
	return nil
}
