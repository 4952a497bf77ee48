// Package telemetrytest has what the tests and benchmarks of tracing share: OTLP/HTTP
// sinks in the process and a meter of the process's CPU.
package telemetrytest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// SpanSink is an OTLP/HTTP collector that keeps the spans exported to it, closed when the
// test ends. Point OTEL_EXPORTER_OTLP_ENDPOINT at url; spans returns what arrived so far.
func SpanSink(t testing.TB) (url string, spans func() []*tracepb.Span) {
	var mu sync.Mutex
	var got []*tracepb.Span
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("an undecodable export request: %v", err)
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got = append(got, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(sink.Close)
	return sink.URL, func() []*tracepb.Span {
		mu.Lock()
		defer mu.Unlock()
		return append([]*tracepb.Span(nil), got...)
	}
}

// DropSink is an OTLP/HTTP collector that accepts every export and decodes nothing, as
// cheap as a collector can be. Point OTEL_EXPORTER_OTLP_ENDPOINT at its URL.
func DropSink() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
}

// ProcessCPU is the user and system time this process has used so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
