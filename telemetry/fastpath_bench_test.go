package telemetry

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/telemetry/directspan"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// BenchmarkRecordSpanFastPath is the fast path (recordSpans: direct, exporter: wire) per
// record as ingress drives it — StartPublish, Segments.Next, Propagates/Inject,
// EndRecord — from one goroutine ("serial") and from eight at once, each its own stream
// with its own Segments ("parallel8", as eight ingress streams). The "-nop" rows hand
// each span to processors that only count it (countEnded and one that reads nothing):
// what a sampled record costs outside the wire encoder and its Processor.
//
//	go test -run XXX -bench BenchmarkRecordSpanFastPath -benchtime 3s -count 3 ./telemetry
func BenchmarkRecordSpanFastPath(b *testing.B) {
	for _, mode := range []string{"serial", "parallel8"} {
		for _, c := range []struct {
			name    string
			ratio   float64
			nop     bool
			process bool // egress: a process span continuing the message's context
		}{{"0pct", 0, false, false}, {"1pct-wire", 0.01, false, false}, {"10pct-wire", 0.1, false, false}, {"100pct-wire", 1, false, false},
			{"100pct-nop", 1, true, false}, {"process-100pct-wire", 1, false, true}, {"process-100pct-nop", 1, true, true}} {
			b.Run(mode+"/"+c.name, func(b *testing.B) {
				sampler, err := newSampler("parentbased_traceidratio", c.ratio)
				if err != nil {
					b.Fatal(err)
				}
				res := resource.NewSchemaless()
				tr, err := newTracing("v", res, sampler, bigSegments, recordSpans{direct: true}, &wireDiscard{},
					sdktrace.WithMaxQueueSize(16384), sdktrace.WithMaxExportBatchSize(4096))
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
				if c.nop {
					m, err := directspan.New([]sdktrace.SpanProcessor{countEnded{tr.Spans}, nopProcessor{}}, sdktrace.NewSpanLimits(), res,
						instrumentationName, "v")
					if err != nil {
						b.Fatal(err)
					}
					tr.useDirect(m)
				}
				start := time.Now() // ingress takes a record's start for every record, traced or not
				b.ReportAllocs()
				cpu0 := telemetrytest.ProcessCPU()
				if mode == "serial" {
					seg := tr.NewSegments("POST r", trace.SpanContext{})
					defer seg.Close()
					props := map[string]string{}
					for i := 0; b.Loop(); i++ {
						oneRecord(tr, seg, props, start, c.process)
						if c.ratio > 0 && !c.nop && i%4096 == 0 {
							_ = tr.ForceFlush(context.Background()) // measure the export too, not drops
						}
					}
				} else {
					b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					var n, streams atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						seg := tr.NewSegments(fmt.Sprintf("POST r%d", streams.Add(1)), trace.SpanContext{})
						defer seg.Close()
						props := map[string]string{}
						for pb.Next() {
							oneRecord(tr, seg, props, start, c.process)
							if c.ratio > 0 && !c.nop && n.Add(1)%4096 == 0 {
								_ = tr.ForceFlush(context.Background())
							}
						}
					})
				}
				_ = tr.ForceFlush(context.Background())
				// CPU rather than time: the export runs beside the loop.
				b.ReportMetric(float64((telemetrytest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// oneRecord is a record's tracing as ingress does it, for a message without properties
// (props: the stream's reused map Inject writes into); with process, a message's as
// egress does it, the message's properties the last ones ingress wrote.
func oneRecord(tr *Tracing, seg *Segments, props map[string]string, start time.Time, process bool) {
	var r RecordSpan
	if process {
		if len(props) == 0 {
			(&RecordSpan{tid: trace.TraceID{1, 2, 3}, sid: trace.SpanID{4, 5}, flags: trace.FlagsSampled}).Inject(props)
		}
		tr.StartProcess(&r, props, seg.Next(1024), "persistent://public/default/t", "subscription", 1024, start)
		tr.EndRecord(&r, "123:456:-1:0", nil)
		return
	}
	tr.StartPublish(&r, trace.SpanContext{}, seg.Next(1024), "persistent://public/default/t", 1024, start)
	if r.Propagates(nil) {
		r.Inject(props)
	}
	tr.EndRecord(&r, "123:456:-1:0", nil)
}

// nopProcessor keeps nothing of a span and does nothing with it.
type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }
func (nopProcessor) EndKeepsNoSpan()                                 {}
