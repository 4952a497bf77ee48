package otlpwire

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// recordSpans are n spans as the bridge ends a published record's (telemetry/records.go):
// producer kind, the messaging attributes, a link to the stream's segment span, under the
// bridge's resource and instrumentation scope.
func recordSpans(n int) []sdktrace.ReadOnlySpan {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0",
		attribute.String("service.name", "recordio-bridge"), attribute.String("service.version", "v1.2.3"),
		attribute.String("telemetry.sdk.language", "go"), attribute.String("telemetry.sdk.name", "opentelemetry"),
		attribute.String("telemetry.sdk.version", "1.47.0"), attribute.String("host.name", "bridge-7d9f8c-abcde"),
		attribute.String("k8s.pod.name", "bridge-7d9f8c-abcde"), attribute.String("k8s.namespace.name", "default"))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("github.com/recordio-bridge/bridge", trace.WithInstrumentationVersion("v1.2.3"))
	segment := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9, 9}, SpanID: trace.SpanID{8, 8}, TraceFlags: trace.FlagsSampled})
	start := time.Now()
	for i := range n {
		_, s := tr.Start(context.Background(), "publish persistent://public/default/t", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(start.Add(time.Duration(i)*time.Microsecond)))
		s.SetAttributes(attribute.String("messaging.system", "pulsar"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", "persistent://public/default/t"), attribute.Int("messaging.message.body.size", 1024),
			attribute.String("messaging.message.id", fmt.Sprintf("123:%d:-1:0", i)))
		s.AddLink(trace.Link{SpanContext: segment})
		s.End(trace.WithTimestamp(start.Add(time.Duration(i)*time.Microsecond + 800*time.Microsecond)))
	}
	spans := rec.Ended()
	return spans
}

// discardClient marshals what the official exporter gives it, as its clients do, and
// drops it (as telemetry's BenchmarkRecordSpan does).
type discardClient struct{}

func (discardClient) Start(context.Context) error { return nil }
func (discardClient) Stop(context.Context) error  { return nil }
func (discardClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	_, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	return err
}

// discardTransport drops the encoded request.
type discardTransport struct{}

func (discardTransport) send(context.Context, []byte) ([]byte, error) { return nil, nil }
func (discardTransport) bufferKept() bool                             { return false }
func (discardTransport) close() error                                 { return nil }

// BenchmarkExport is one ExportSpans of a batch of record spans, transport excluded: the
// official exporter (transform + proto.Marshal) against this one (protowire into its
// buffer). ns/span, allocs/span and B/span are per span of the batch.
func BenchmarkExport(b *testing.B) {
	for _, n := range []int{512, 4096} {
		spans := recordSpans(n)
		official, err := otlptrace.New(context.Background(), discardClient{})
		if err != nil {
			b.Fatal(err)
		}
		wire := &Exporter{cfg: Config{Timeout: time.Minute, MaxRequestBytes: defaultMaxRequest}, tr: discardTransport{}, sem: make(chan struct{}, 1)}
		wire.stop, wire.stopNow = context.WithCancel(context.Background())
		for _, c := range []struct {
			name string
			exp  sdktrace.SpanExporter
		}{{"official", official}, {"wire", wire}} {
			b.Run(fmt.Sprintf("%s/batch%d", c.name, n), func(b *testing.B) {
				ctx := context.Background()
				_ = c.exp.ExportSpans(ctx, spans) // the wire exporter's buffer grown once, as in steady state
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := c.exp.ExportSpans(ctx, spans); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				r := testing.AllocsPerRun(3, func() { _ = c.exp.ExportSpans(ctx, spans) })
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/span")
				b.ReportMetric(r/float64(n), "allocs/span")
			})
		}
		_ = official.Shutdown(context.Background())
		_ = wire.Shutdown(context.Background())
	}
}

// BenchmarkAppendSpan is the per-span entry point alone.
func BenchmarkAppendSpan(b *testing.B) {
	s := recordSpans(1)[0]
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendSpan(buf[:0], s)
	}
	b.ReportMetric(float64(len(buf)), "bytes/span")
}

// discardSender takes each request and drops it.
type discardSender struct{}

func (discardSender) SendRequest(context.Context, []byte, int) (bool, error) { return true, nil }
func (discardSender) Shutdown(context.Context) error                         { return nil }

// BenchmarkProcessorOnEnd is a record span's cost in the Processor: record spans (stubs,
// made before the clock starts) handed to the Processor's OnEnd, from one
// goroutine (serial), from GOMAXPROCS goroutines at once (parallel: run with -cpu 2,8
// to see how the Processor's lock holds up with many streams on few cores) and from
// eight at once whatever GOMAXPROCS (parallel8: the eight streams of the overhead
// target), with the bridge's batching (a queue of 16 384 spans, batches of 4 096).
// cpu-ns/op is the process's CPU per span, the export goroutine's included (the
// goroutines flush every 8 192 spans between them, each every 8192/goroutines of its own,
// so the export keeps up rather than spans being dropped: a dropped span is not encoded,
// and would make the figure look better than it is).
func BenchmarkProcessorOnEnd(b *testing.B) {
	res := resource.NewSchemaless(attribute.String("service.name", "recordio-bridge"), attribute.String("service.version", "v1.2.3"))
	seg := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9, 9}, SpanID: trace.SpanID{8, 8}, TraceFlags: trace.FlagsSampled})
	spans := make([]sdktrace.ReadOnlySpan, 4096)
	for i := range spans {
		start := time.Unix(1700000000, int64(i))
		spans[i] = tracetest.SpanStub{Name: "publish persistent://public/default/t", SpanKind: trace.SpanKindProducer, StartTime: start,
			EndTime: start.Add(300 * time.Microsecond), Resource: res,
			InstrumentationScope: instrumentation.Scope{Name: "github.com/recordio-bridge/bridge", Version: "v1.2.3"},
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), byte(i >> 8), 1}, SpanID: trace.SpanID{byte(i), 2},
				TraceFlags: trace.FlagsSampled}),
			Attributes: []attribute.KeyValue{attribute.String("messaging.system", "pulsar"), attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", "persistent://public/default/t"), attribute.Int("messaging.message.body.size", 1024),
				attribute.String("messaging.message.id", "123:456:-1:0")},
			Links: []sdktrace.Link{{SpanContext: seg}}}.Snapshot()
	}
	for _, c := range []struct {
		name       string
		goroutines int // 0: one, serially; -1: GOMAXPROCS
	}{{"serial", 0}, {"parallel", -1}, {"parallel8", 8}} {
		b.Run(c.name, func(b *testing.B) {
			p := NewProcessor(discardSender{}, ProcessorOptions{MaxQueueSize: 16384, MaxExportBatchSize: 4096, ScheduleDelay: time.Hour})
			defer func() { _ = p.Shutdown(context.Background()) }()
			procs := runtime.GOMAXPROCS(0)
			goroutines, parallelism := 1, 1 // RunParallel runs parallelism*GOMAXPROCS
			switch {
			case c.goroutines < 0:
				goroutines = procs
			case c.goroutines > 0:
				parallelism = (c.goroutines + procs - 1) / procs
				goroutines = procs * parallelism
			}
			flushEvery := 8192 / goroutines
			body := func(i int) {
				p.OnEnd(spans[i%len(spans)])
				if i%flushEvery == flushEvery-1 {
					_ = p.ForceFlush(context.Background()) // measure the export too, not drops
				}
			}
			b.ReportAllocs()
			cpu0 := telemetrytest.ProcessCPU()
			if c.goroutines != 0 {
				b.SetParallelism(parallelism)
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						body(i)
					}
				})
			} else {
				for i := 0; b.Loop(); i++ {
					body(i)
				}
			}
			_ = p.ForceFlush(context.Background())
			b.ReportMetric(float64((telemetrytest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if d := p.Dropped(); d > 0 {
				b.ReportMetric(float64(d)/float64(b.N), "dropped/op")
			}
		})
	}
}
