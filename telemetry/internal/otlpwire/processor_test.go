package otlpwire

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
)

// recordInput is one record-like span as the bridge's tracer is told it, with its
// attributes and links.
type recordInput struct {
	name       string
	start, end time.Time
	sc, parent trace.SpanContext
	err        error
	attrs      []attribute.KeyValue
	links      []trace.Link
	kind       trace.SpanKind
}

// recordInputs are record-like spans, some failed, some with a remote parent, some
// recorded and not sampled, with attributes past the limits below.
func recordInputs(n int) []recordInput {
	start := time.Unix(1700000000, 0)
	seg := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
	ts, _ := trace.ParseTraceState("v=1")
	out := make([]recordInput, 0, n)
	for i := range n {
		in := recordInput{name: "publish t" + strconv.Itoa(i%3), kind: trace.SpanKindProducer,
			start: start.Add(time.Duration(i) * time.Millisecond), end: start.Add(time.Duration(i)*time.Millisecond + 300*time.Microsecond),
			sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), 1}, SpanID: trace.SpanID{byte(i), 2},
				TraceFlags: trace.FlagsSampled, TraceState: ts}),
			attrs: []attribute.KeyValue{attribute.String("messaging.system", "pulsar"), attribute.String("messaging.destination.name", "a long topic name"),
				attribute.Int("messaging.message.body.size", i), attribute.String("messaging.message.id", strconv.Itoa(i)),
				attribute.String("x", "dropped by the count limit")},
			links: []trace.Link{{SpanContext: seg}}}
		if i%4 == 1 {
			in.parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), 1}, SpanID: trace.SpanID{7}, Remote: true,
				TraceFlags: trace.FlagsSampled})
		}
		if i%5 == 2 {
			in.err = errors.New("the broker refused it")
		}
		if i%7 == 3 { // recorded, not sampled: no processor exports it
			in.sc = in.sc.WithTraceFlags(0)
		}
		out = append(out, in)
	}
	return out
}

// madeBySDK makes the spans ins describe with the SDK's tracer, under limits, as the
// bridge makes its record spans (ids and decision preset, attributes set, an error
// recorded, ended at the end given), each with the attributes attrs gives it, and
// returns them as its processors get them.
func madeBySDK(t *testing.T, limits sdktrace.SpanLimits, ins []recordInput, attrs func(i int, in recordInput) []attribute.KeyValue) []sdktrace.ReadOnlySpan {
	t.Helper()
	var got spanRecorder
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "direct"))),
		sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(inputSampler{}), sdktrace.WithIDGenerator(inputIDs{}),
		sdktrace.WithSpanProcessor(&got))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("direct-scope", trace.WithInstrumentationVersion("v1"))
	for i, in := range ins {
		ctx := context.WithValue(context.Background(), inputKey{}, &ins[i])
		if in.parent.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, in.parent)
		}
		_, span := tracer.Start(ctx, in.name, trace.WithSpanKind(in.kind), trace.WithTimestamp(in.start), trace.WithLinks(in.links...))
		span.SetAttributes(attrs(i, in)...)
		if in.err != nil {
			span.RecordError(in.err, trace.WithTimestamp(in.end))
			span.SetStatus(codes.Error, in.err.Error())
		}
		span.End(trace.WithTimestamp(in.end))
	}
	if len(got.spans) != len(ins) {
		t.Fatalf("the SDK made %d of %d spans", len(got.spans), len(ins))
	}
	return got.spans
}

func inputAttrs(_ int, in recordInput) []attribute.KeyValue { return in.attrs }

type inputKey struct{}

func inputOf(ctx context.Context) *recordInput { return ctx.Value(inputKey{}).(*recordInput) }

// inputSampler records every span, sampled as its input says, with its tracestate.
type inputSampler struct{}

func (inputSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	in := inputOf(p.ParentContext)
	d := sdktrace.RecordOnly
	if in.sc.IsSampled() {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: in.sc.TraceState()}
}

func (inputSampler) Description() string { return "input" }

// inputIDs gives each span its input's ids.
type inputIDs struct{}

func (inputIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	in := inputOf(ctx)
	return in.sc.TraceID(), in.sc.SpanID()
}

func (inputIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	return inputOf(ctx).sc.SpanID()
}

// spanRecorder keeps every span ended, in order.
type spanRecorder struct{ spans []sdktrace.ReadOnlySpan }

func (*spanRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *spanRecorder) OnEnd(s sdktrace.ReadOnlySpan)                 { r.spans = append(r.spans, s) }
func (*spanRecorder) Shutdown(context.Context) error                  { return nil }
func (*spanRecorder) ForceFlush(context.Context) error                { return nil }

// procPair is the SDK's batch span processor around the official exporter, and a
// Processor around the wire exporter, with the same batching, each sending to its own
// collector.
type procPair struct {
	sdk, wire sdktrace.SpanProcessor
}

func newProcPair(t *testing.T, official sdktrace.SpanExporter, wire *Exporter, batch int) procPair {
	bsp := sdktrace.NewBatchSpanProcessor(official, sdktrace.WithMaxExportBatchSize(batch), sdktrace.WithBatchTimeout(time.Hour))
	p := NewProcessor(wire, ProcessorOptions{MaxExportBatchSize: batch, ScheduleDelay: time.Hour})
	t.Cleanup(func() { _ = bsp.Shutdown(context.Background()); _ = p.Shutdown(context.Background()) })
	return procPair{bsp, p}
}

// feed hands the same spans to both: the SDK's and stubs, then record spans the SDK
// made under limits that drop attributes.
func (pp procPair) feed(t *testing.T, spans []sdktrace.ReadOnlySpan, records []recordInput) {
	limits := sdktrace.NewSpanLimits()
	limits.AttributeCountLimit = 4
	limits.AttributeValueLengthLimit = 6
	for _, s := range append(spans, madeBySDK(t, limits, records, inputAttrs)...) {
		if s != nil {
			pp.sdk.OnEnd(s)
			pp.wire.OnEnd(s)
		}
	}
	for _, p := range []sdktrace.SpanProcessor{pp.sdk, pp.wire} {
		if err := p.ForceFlush(exportCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

func mixedSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	return append(sdkSpans(t), stubSpans(t)...)
}

// The contract: the same spans (the SDK's, stubs over several resources and scopes,
// record spans under limits that drop attributes) through a Processor and through the
// SDK's batch span processor with the official exporter make the same requests, batch
// by batch, over OTLP/HTTP.
func TestProcessorDifferentialHTTP(t *testing.T) {
	for _, batch := range []int{4096, 5} {
		t.Run(strconv.Itoa(batch), func(t *testing.T) {
			co, cw := newCapture(t), newCapture(t)
			off, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(co.url()),
				otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(Config{Protocol: ProtocolHTTP, Endpoint: cw.url()})
			if err != nil {
				t.Fatal(err)
			}
			newProcPair(t, off, w, batch).feed(t, mixedSpans(t), recordInputs(40))
			o, g := co.take(), cw.take()
			if len(o) != len(g) || len(o) == 0 {
				t.Fatalf("%d requests through the SDK's processor, %d through otlpwire's", len(o), len(g))
			}
			for i := range o {
				requireEqual(t, decode(t, o[i].body), decode(t, g[i].body))
			}
		})
	}
}

// The same over gRPC.
func TestProcessorDifferentialGRPC(t *testing.T) {
	for _, batch := range []int{4096, 5} {
		t.Run(strconv.Itoa(batch), func(t *testing.T) {
			co, cw := newGRPCCapture(t), newGRPCCapture(t)
			off, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(co.addr), otlptracegrpc.WithInsecure(),
				otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(Config{Protocol: ProtocolGRPC, Endpoint: cw.addr, Insecure: true})
			if err != nil {
				t.Fatal(err)
			}
			newProcPair(t, off, w, batch).feed(t, mixedSpans(t), recordInputs(40))
			o, g := co.take(), cw.take()
			if len(o) != len(g) || len(o) == 0 {
				t.Fatalf("%d requests through the SDK's processor, %d through otlpwire's", len(o), len(g))
			}
			for i := range o {
				requireEqual(t, o[i], g[i])
			}
		})
	}
}

// fakeSender decodes each request it is sent and counts its spans; with block set, each
// send waits for a value on it (or its ctx).
type fakeSender struct {
	t       *testing.T
	arrived chan int // each request's span count
	block   chan struct{}
	once    sync.Once
	spans   atomic.Int64
	shut    atomic.Bool
}

// blocking makes each send wait until release (deferred by the caller after its
// Shutdown, so a failing test ends rather than hangs).
func (f *fakeSender) blocking() { f.block = make(chan struct{}) }

func (f *fakeSender) release() { f.once.Do(func() { close(f.block) }) }

func newFakeSender(t *testing.T) *fakeSender {
	return &fakeSender{t: t, arrived: make(chan int, 1024)}
}

func (f *fakeSender) SendRequest(ctx context.Context, body []byte, spans int) (bool, error) {
	req := decode(f.t, body)
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	if n != spans {
		f.t.Errorf("a request of %d spans is said to have %d", n, spans)
	}
	f.arrived <- n
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	f.spans.Add(int64(n))
	return true, nil
}

func (f *fakeSender) Shutdown(context.Context) error { f.shut.Store(true); return nil }

func (f *fakeSender) next(t *testing.T) int {
	t.Helper()
	select {
	case n := <-f.arrived:
		return n
	case <-time.After(20 * time.Second):
		t.Fatal("no request arrived")
		return 0
	}
}

func oneRecordSpan(i int) sdktrace.ReadOnlySpan { return recordSpans(i + 1)[i] }

// A batch is sent as soon as it is full, without a flush or the timer.
func TestProcessorSendsFullBatches(t *testing.T) {
	f := newFakeSender(t)
	p := NewProcessor(f, ProcessorOptions{MaxExportBatchSize: 3, ScheduleDelay: time.Hour})
	defer p.Shutdown(context.Background())
	spans := recordSpans(7)
	for _, s := range spans {
		p.OnEnd(s)
	}
	if a, b := f.next(t), f.next(t); a != 3 || b != 3 {
		t.Fatalf("requests of %d and %d spans, want 3 and 3", a, b)
	}
	if err := p.ForceFlush(exportCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := f.next(t); n != 1 {
		t.Fatalf("the flush sent %d spans, want 1", n)
	}
}

// A batch not full is sent when ScheduleDelay has passed.
func TestProcessorSendsOnTheTimer(t *testing.T) {
	f := newFakeSender(t)
	p := NewProcessor(f, ProcessorOptions{MaxExportBatchSize: 100, ScheduleDelay: 20 * time.Millisecond})
	defer p.Shutdown(context.Background())
	for round := range 2 { // the timer runs again after it fired
		p.OnEnd(oneRecordSpan(round))
		if n := f.next(t); n != 1 {
			t.Fatalf("round %d: %d spans sent, want 1", round, n)
		}
	}
}

// With MaxQueueSize spans waiting (sent ones not done yet, and queued), more are dropped
// and counted; what was not dropped is exported, and Exported is told each request.
func TestProcessorDropsWhenTheQueueIsFull(t *testing.T) {
	f := newFakeSender(t)
	f.blocking()
	var exported, failed atomic.Int64
	p := NewProcessor(f, ProcessorOptions{MaxQueueSize: 4, MaxExportBatchSize: 2, ScheduleDelay: time.Hour, Exported: func(n int, err error) {
		if err != nil {
			failed.Add(int64(n))
		} else {
			exported.Add(int64(n))
		}
	}})
	defer p.Shutdown(context.Background())
	defer f.release()
	spans := recordSpans(9)
	p.OnEnd(spans[0])
	p.OnEnd(spans[1])
	f.next(t) // the first batch is being sent, and held there
	for _, s := range spans[2:] {
		p.OnEnd(s)
	}
	if d := p.Dropped(); d != 5 {
		t.Fatalf("%d spans dropped, want 5 (4 held)", d)
	}
	if n := p.Ended(); n != 9 {
		t.Fatalf("%d spans counted ended, want 9 (taken or dropped)", n)
	}
	f.release()
	if err := p.ForceFlush(exportCtx(t)); err != nil {
		t.Fatal(err)
	}
	if e, fl := exported.Load(), failed.Load(); e != 4 || fl != 0 || f.spans.Load() != 4 {
		t.Fatalf("exported %d, failed %d, the collector got %d; want 4, 0, 4", e, fl, f.spans.Load())
	}
	// Room again: a new span is taken.
	p.OnEnd(spans[0])
	if err := p.ForceFlush(exportCtx(t)); err != nil {
		t.Fatal(err)
	}
	if d, e := p.Dropped(), exported.Load(); d != 5 || e != 5 {
		t.Fatalf("after the queue emptied: dropped %d, exported %d; want 5, 5", d, e)
	}
	// An unsampled span is not counted; a span ended after Shutdown is, though not taken.
	p.OnEnd(unsampled(t))
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.OnEnd(spans[1])
	if n, e := p.Ended(), exported.Load(); n != 11 || e != 5 {
		t.Fatalf("after Shutdown: %d ended, %d exported; want 11, 5", n, e)
	}
}

// unsampled is a span that ended without the sampled flag.
func unsampled(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	stub := tracetest.SpanStub{Name: "unsampled", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})}
	return stub.Snapshot()
}

// ForceFlush returns ctx's error when an export does not end by then.
func TestProcessorForceFlushHonoursCtx(t *testing.T) {
	f := newFakeSender(t)
	f.blocking()
	p := NewProcessor(f, ProcessorOptions{ScheduleDelay: time.Hour})
	defer p.Shutdown(context.Background())
	defer f.release()
	p.OnEnd(oneRecordSpan(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.ForceFlush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ForceFlush: %v, want its ctx's deadline", err)
	}
	f.release()
	if err := p.Shutdown(exportCtx(t)); err != nil {
		t.Fatal(err)
	}
	if f.spans.Load() != 1 || !f.shut.Load() {
		t.Fatalf("after Shutdown: %d spans sent, sender shut down %v", f.spans.Load(), f.shut.Load())
	}
}

// Shutdown during an export the collector never answers: it waits until its ctx ends,
// then cuts the export, which is told to Exported as failed; spans ended later are
// ignored, and no goroutine is left (TestMain's goleak).
func TestProcessorShutdownDuringHungExport(t *testing.T) {
	for _, proto := range []Protocol{ProtocolHTTP, ProtocolGRPC} {
		t.Run(string(proto), func(t *testing.T) {
			var cfg Config
			var arrived <-chan struct{}
			if proto == ProtocolHTTP {
				c := newCapture(t)
				arrived = hang(t, c)
				cfg = Config{Protocol: proto, Endpoint: c.url(), Timeout: time.Hour, Retry: fastRetry}
			} else {
				g := newGRPCCapture(t)
				ch := make(chan struct{}, 16)
				g.answer = func(ctx context.Context, _ int) (*coltracepb.ExportTraceServiceResponse, error) {
					ch <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				}
				arrived = ch
				cfg = Config{Protocol: proto, Endpoint: g.addr, Insecure: true, Timeout: time.Hour, Retry: fastRetry}
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var failed atomic.Int64
			p := NewProcessor(e, ProcessorOptions{ScheduleDelay: time.Hour, Exported: func(n int, err error) {
				if err != nil {
					failed.Add(int64(n))
				}
			}})
			p.OnEnd(oneRecordSpan(0))
			go func() { _ = p.ForceFlush(context.Background()) }() // answered by Shutdown
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the request never reached the collector")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want its ctx's deadline", err)
			}
			if n := failed.Load(); n != 1 {
				t.Fatalf("%d spans counted failed, want the cut export's 1", n)
			}
			p.OnEnd(oneRecordSpan(1))
			if err := p.ForceFlush(context.Background()); err != nil {
				t.Fatalf("ForceFlush after Shutdown: %v", err)
			}
		})
	}
}

// Spans ended from many goroutines at once all arrive, each once (run with -race).
func TestProcessorConcurrentOnEnd(t *testing.T) {
	f := newFakeSender(t)
	p := NewProcessor(f, ProcessorOptions{MaxQueueSize: 1 << 16, MaxExportBatchSize: 64, ScheduleDelay: time.Millisecond})
	spans := recordSpans(200)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, s := range spans {
				p.OnEnd(s)
			}
		})
	}
	wg.Wait()
	if err := p.Shutdown(exportCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n, d := f.spans.Load(), p.Dropped(); n != 8*200 || d != 0 {
		t.Fatalf("%d spans sent, %d dropped; want %d, 0", n, d, 8*200)
	}
}

// kept is what p keeps for reuse: emptied batches, and chunks (their bytes, and whether
// each is of chunkBytes).
func (p *Processor) kept() (batches, chunks, bytes int, sized bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sized = true
	for _, c := range p.chunks {
		bytes += cap(c)
		sized = sized && cap(c) == chunkBytes && len(c) == 0
	}
	return len(p.free), len(p.chunks), bytes, sized
}

// What a Processor keeps for reuse is bounded however large and however many the
// batches that were sent: at most maxFreeBatches emptied batches and keptBufferBytes of
// chunks, each of chunkBytes (a span larger than that had a chunk of its own, not kept).
func TestProcessorKeepsBoundedFreeBatchesAndChunks(t *testing.T) {
	t.Run("large spans", func(t *testing.T) {
		f := newFakeSender(t)
		f.blocking()
		p := NewProcessor(f, ProcessorOptions{MaxQueueSize: 64, MaxExportBatchSize: 1, ScheduleDelay: time.Hour})
		defer f.release()
		defer p.Shutdown(context.Background())
		big := strings.Repeat("x", keptBufferBytes/3)
		for i := range 12 { // each its own batch of ~keptBufferBytes/3, all waiting for the blocked send
			s := tracetest.SpanStub{Name: "big", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)},
				TraceFlags: trace.FlagsSampled}), Attributes: []attribute.KeyValue{attribute.String("v", big)}}.Snapshot()
			p.OnEnd(s)
		}
		f.release()
		if err := p.ForceFlush(exportCtx(t)); err != nil {
			t.Fatal(err)
		}
		for range 12 {
			if n := f.next(t); n != 1 {
				t.Fatalf("a request of %d spans, want 1", n)
			}
		}
		if b, c, bytes, sized := p.kept(); b == 0 || b > maxFreeBatches || c != 0 || !sized {
			t.Fatalf("kept %d batches and %d chunks of %d bytes (all of chunkBytes, empty: %v); want 1 to %d batches and no chunk",
				b, c, bytes, sized, maxFreeBatches)
		}
	})
	t.Run("many batches", func(t *testing.T) {
		f := newFakeSender(t)
		f.blocking()
		// Batches of ~10 full chunks each, waiting for the blocked send: ~160 chunks, more
		// than are kept.
		const batch, batches = 1024, 16
		p := NewProcessor(f, ProcessorOptions{MaxQueueSize: batch * batches, MaxExportBatchSize: batch, ScheduleDelay: time.Hour})
		defer f.release()
		defer p.Shutdown(context.Background())
		spans := recordSpans(8)
		for i := range batch * batches {
			p.OnEnd(spans[i%len(spans)])
		}
		f.release()
		if err := p.ForceFlush(exportCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got := f.spans.Load(); got != batch*batches || p.Dropped() != 0 {
			t.Fatalf("%d spans sent, %d dropped; want %d, 0", got, p.Dropped(), batch*batches)
		}
		if b, c, bytes, sized := p.kept(); b == 0 || b > maxFreeBatches || c != keptBufferBytes/chunkBytes || !sized {
			t.Fatalf("kept %d batches and %d chunks of %d bytes (all of chunkBytes, empty: %v); want 1 to %d batches, %d chunks",
				b, c, bytes, sized, maxFreeBatches, keptBufferBytes/chunkBytes)
		}
	})
}

// Record spans under span limits that bite (attributes
// dropped and truncated), that do not (the SDK's defaults: every record attribute
// kept as given), with the count exactly at the limit and with only lengths cut, some
// with an attribute whose key and value are not UTF-8, some with a key twice and an
// invalid attribute: through the Processor they make the requests the SDK's
// batch processor and the official exporter make of the same spans with each bad
// sequence already replaced by U+FFFD (the official exporter refuses invalid UTF-8).
func TestProcessorRecordSpansUnderLimitsAndInvalidUTF8(t *testing.T) {
	tight := sdktrace.NewSpanLimits()
	tight.AttributeCountLimit, tight.AttributeValueLengthLimit = 4, 6
	atLimit := sdktrace.NewSpanLimits()
	atLimit.AttributeCountLimit = 6
	lengths := sdktrace.NewSpanLimits()
	lengths.AttributeValueLengthLimit = 6
	for _, lc := range []struct {
		name   string
		limits sdktrace.SpanLimits
	}{{"defaults", sdktrace.NewSpanLimits()}, {"tight", tight}, {"at the limit", atLimit}, {"lengths cut only", lengths}} {
		t.Run(lc.name, func(t *testing.T) {
			co, cw := newCapture(t), newCapture(t)
			off, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(co.url()),
				otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(Config{Protocol: ProtocolHTTP, Endpoint: cw.url()})
			if err != nil {
				t.Fatal(err)
			}
			pp := newProcPair(t, off, w, 4096)
			// The same spans but for their invalid UTF-8, already replaced in those the SDK's
			// exporter is given.
			withAttrs := func(bad bool) func(int, recordInput) []attribute.KeyValue {
				return func(i int, in recordInput) []attribute.KeyValue {
					a := in.attrs
					if i%3 == 0 {
						first := attribute.String("k\uFFFD", "v\uFFFD")
						if bad {
							first = attribute.String("k\xfe", "v\xc3")
						}
						a = append([]attribute.KeyValue{first}, a...)
					}
					if i%5 == 0 { // a key twice: the SDK keeps its first place and last value
						a = append(a[:len(a):len(a)], attribute.String("messaging.system", "other"), attribute.KeyValue{})
					}
					return a
				}
			}
			ins := recordInputs(40)
			fixed, bad := madeBySDK(t, lc.limits, ins, withAttrs(false)), madeBySDK(t, lc.limits, ins, withAttrs(true))
			for i := range ins {
				pp.sdk.OnEnd(fixed[i])
				pp.wire.OnEnd(bad[i])
			}
			for _, p := range []sdktrace.SpanProcessor{pp.sdk, pp.wire} {
				if err := p.ForceFlush(exportCtx(t)); err != nil {
					t.Fatal(err)
				}
			}
			o, g := co.take(), cw.take()
			if len(o) != len(g) || len(o) == 0 {
				t.Fatalf("%d requests through the SDK's processor, %d through otlpwire's", len(o), len(g))
			}
			for i := range o {
				requireEqual(t, decode(t, o[i].body), decode(t, g[i].body))
			}
		})
	}
}

// tokenSender sends nothing: each request waits for a token (or its ctx), then is done.
type tokenSender struct{ tokens chan struct{} }

func (s tokenSender) SendRequest(ctx context.Context, _ []byte, _ int) (bool, error) {
	select {
	case <-s.tokens:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

func (tokenSender) Shutdown(context.Context) error { return nil }

// With the bridge's batching (queue 16 384, batches of 4 096, ~1.4 MB each of record
// spans) and three batches waiting for a slow collector, the next round of three
// batches reuses what the first used: it makes less than one batch's worth of chunks,
// and (without the race detector, whose sync.Pool drops buffers at random) allocates
// less than that in all. The Processor used to keep 4 MiB of emptied batches, two of
// these, and grow the third anew by doubling: the second round allocated ~6.6 MB.
func TestProcessorReusesChunksAcrossWaitingBatches(t *testing.T) {
	s := tokenSender{tokens: make(chan struct{}, 8)}
	const batch = 4096
	p := NewProcessor(s, ProcessorOptions{MaxQueueSize: 4 * batch, MaxExportBatchSize: batch, ScheduleDelay: time.Hour})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	}()
	spans := recordSpans(16)
	made := func() int64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.made
	}
	round := func() (alloc uint64, chunks int64) {
		var before, after runtime.MemStats
		m := made()
		runtime.ReadMemStats(&before)
		for i := range 3 * batch {
			p.OnEnd(spans[i%len(spans)])
		}
		runtime.ReadMemStats(&after)
		chunks = made() - m
		for range 3 {
			s.tokens <- struct{}{}
		}
		if err := p.ForceFlush(exportCtx(t)); err != nil {
			t.Fatal(err)
		}
		return after.TotalAlloc - before.TotalAlloc, chunks
	}
	a1, c1 := round()
	a2, c2 := round()
	if d := p.Dropped(); d != 0 {
		t.Fatalf("%d spans dropped", d)
	}
	perBatch := batch * uint64(len(appendSpanField(nil, spans[0], nil)))
	t.Logf("first round: %d bytes allocated, %d of chunks; second: %d, %d; a batch is %d bytes", a1, c1, a2, c2, perBatch)
	if uint64(c2) >= perBatch || (!raceOn && a2 >= perBatch) {
		t.Fatalf("the second round of 3 batches allocated %d bytes, %d of chunks; want less than a batch's %d", a2, c2, perBatch)
	}
}
