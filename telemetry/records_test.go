package telemetry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/telemetry/internal/otlpwire"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// testTracing is the bridge's SDK pipeline around an in-memory exporter.
func testTracing(t testing.TB, sampler sdktrace.Sampler, seg segmentOptions) (*Tracing, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tr := newTracing("v1", resource.NewSchemaless(), sampler, seg, nil, exp)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func flushed(t *testing.T, tr *Tracing, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

var bigSegments = segmentOptions{records: 1 << 40, interval: time.Hour}

// Each record of a stream is sampled on its own, as the sampler decides for its own trace
// id; the message carries its context either way, and the span exported is the one the
// message names.
func TestRecordsAreSampledOnTheirOwn(t *testing.T) {
	ratio := sdktrace.TraceIDRatioBased(0.25)
	// The sampler as OTEL_TRACES_SAMPLER=parentbased_traceidratio makes it: its decision
	// computed (sampler.go), checked here against the SDK's ratio sampler.
	fast, err := newSampler("parentbased_traceidratio", 0.25)
	if err != nil {
		t.Fatal(err)
	}
	tr, exp := testTracing(t, fast, bigSegments)
	segs := tr.NewSegments("POST r", trace.SpanContext{})
	const n = 2000
	sampled := map[trace.SpanID]trace.SpanContext{}
	for range n {
		var r RecordSpan
		tr.StartPublish(&r, trace.SpanContext{}, segs.Next(1), "persistent://public/default/t", 1, time.Now())
		props := map[string]string{}
		r.Inject(props)
		sc, ok := ParseTraceparent(props)
		if !ok || sc.TraceID() != r.SpanContext().TraceID() || sc.SpanID() != r.SpanContext().SpanID() {
			t.Fatalf("properties %v do not carry the record's context %v", props, r.SpanContext())
		}
		want := ratio.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sc.IsSampled() != want || r.Recording() != want {
			t.Fatalf("record %v: sampled %v, recording %v; the ratio sampler says %v", sc, sc.IsSampled(), r.Recording(), want)
		}
		if want {
			sampled[sc.SpanID()] = sc
		}
		tr.EndRecord(&r, "1:2:-1:0", nil)
	}
	segs.Close()
	if len(sampled) < n/4-150 || len(sampled) > n/4+150 {
		t.Fatalf("%d of %d records sampled at 25 %%", len(sampled), n)
	}
	var seg trace.SpanContext
	publish := 0
	for _, s := range flushed(t, tr, exp) {
		if s.Name == "segment POST r" {
			seg = s.SpanContext
		}
	}
	for _, s := range exp.GetSpans() {
		if s.Name != "publish persistent://public/default/t" {
			continue
		}
		publish++
		if _, ok := sampled[s.SpanContext.SpanID()]; !ok || s.Parent.IsValid() || s.SpanKind != trace.SpanKindProducer {
			t.Errorf("span %v (parent %v, kind %v) is not one of the sampled records' roots", s.SpanContext, s.Parent, s.SpanKind)
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != seg.SpanID() {
			t.Errorf("span %v links %v, want the segment %v", s.SpanContext, s.Links, seg)
		}
	}
	if publish != len(sampled) {
		t.Fatalf("%d publish spans exported for %d sampled records", publish, len(sampled))
	}
}

// A record that fails is traced even when it was not sampled, under the ids its message
// would have carried; one that succeeds unsampled leaves no span.
func TestFailedRecordsAreAlwaysTraced(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.ParentBased(sdktrace.NeverSample()), bigSegments)
	var ok RecordSpan
	tr.StartPublish(&ok, trace.SpanContext{}, trace.SpanContext{}, "t", 1, time.Now())
	tr.EndRecord(&ok, "1:1:-1:0", nil)
	start := time.Now().Add(-time.Second)
	var bad RecordSpan
	tr.StartPublish(&bad, trace.SpanContext{}, trace.SpanContext{}, "t", 1, start)
	if bad.Recording() || bad.SpanContext().IsSampled() {
		t.Fatal("always_off sampled a record")
	}
	tr.EndRecord(&bad, "", errors.New("broker said no"))
	spans := flushed(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans; want the failed record's only", len(spans))
	}
	s := spans[0]
	if s.SpanContext.TraceID() != bad.SpanContext().TraceID() || s.SpanContext.SpanID() != bad.SpanContext().SpanID() ||
		s.Status.Code != codes.Error || s.Status.Description != "broker said no" || !s.StartTime.Equal(start) ||
		len(s.Events) != 1 || s.Events[0].Name != "exception" {
		t.Fatalf("failed record's span %+v", s)
	}
}

// A sampled record's span, made when the record ends, starts when the record did, with
// the ids its message carries, its attributes (the message id once persisted) and its
// link to the segment.
func TestASampledRecordsSpanHasItsStartAndAttributes(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.AlwaysSample(), bigSegments)
	segs := tr.NewSegments("POST r", trace.SpanContext{})
	seg := segs.Next(7)
	start := time.Now().Add(-time.Second)
	var r RecordSpan
	tr.StartPublish(&r, trace.SpanContext{}, seg, "persistent://public/default/t", 7, start)
	if !r.Recording() || !r.SpanContext().IsSampled() || !r.Propagates(nil) {
		t.Fatalf("always_on: recording %v, context %v", r.Recording(), r.SpanContext())
	}
	tr.EndRecord(&r, "5:6:-1:0", nil)
	segs.Close()
	var got *tracetest.SpanStub
	spans := flushed(t, tr, exp)
	for i := range spans {
		if spans[i].Name == "publish persistent://public/default/t" {
			got = &spans[i]
		}
	}
	if got == nil {
		t.Fatalf("no publish span in %v", spans)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range got.Attributes {
		attrs[kv.Key] = kv.Value
	}
	if !got.SpanContext.Equal(r.SpanContext()) || !got.StartTime.Equal(start) || !got.EndTime.After(start) || got.SpanKind != trace.SpanKindProducer ||
		attrs["messaging.message.id"].AsString() != "5:6:-1:0" || attrs["messaging.message.body.size"].AsInt64() != 7 ||
		attrs["messaging.destination.name"].AsString() != "persistent://public/default/t" || attrs["messaging.system"].AsString() != "pulsar" ||
		len(got.Links) != 1 || got.Links[0].SpanContext.SpanID() != seg.SpanID() || got.Status.Code == codes.Error {
		t.Fatalf("span %+v; want the record's context %v, start %v, attributes and segment link", got, r.SpanContext(), start)
	}
}

// An unsampled record costs no allocation: no span, no context, no property.
func TestAnUnsampledRecordAllocatesNothing(t *testing.T) {
	tr, _ := testTracing(t, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)), bigSegments)
	segs := tr.NewSegments("POST r", trace.SpanContext{})
	defer segs.Close()
	segs.Next(1) // the segment's span
	start := time.Now()
	props := map[string]string{}
	if n := testing.AllocsPerRun(1000, func() {
		var r RecordSpan
		tr.StartPublish(&r, trace.SpanContext{}, segs.Next(1), "persistent://public/default/t", 1, start)
		if r.Propagates(nil) {
			r.Inject(props)
		}
		tr.EndRecord(&r, "1:2:-1:0", nil)
	}); n != 0 {
		t.Fatalf("%v allocations per unsampled record", n)
	}
}

// A context the client gave the record is its span's parent, and its decision counts.
func TestARecordContinuesItsClientsContext(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)), bigSegments)
	ts, _ := trace.ParseTraceState("vendor=x")
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2}, SpanID: trace.SpanID{3}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	var r RecordSpan
	tr.StartPublish(&r, client, trace.SpanContext{}, "t", 1, time.Now())
	props := map[string]string{}
	r.Inject(props)
	tr.EndRecord(&r, "1:1:-1:0", nil)
	var unsampled RecordSpan
	tr.StartPublish(&unsampled, client.WithTraceFlags(0), trace.SpanContext{}, "t", 1, time.Now())
	tr.EndRecord(&unsampled, "1:2:-1:0", nil)
	spans := flushed(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans; want one (the client's unsampled context is honoured)", len(spans))
	}
	if s := spans[0]; s.Parent.SpanID() != client.SpanID() || s.SpanContext.TraceID() != client.TraceID() || !s.Parent.IsRemote() {
		t.Fatalf("span %v parent %v; want a child of %v", s.SpanContext, s.Parent, client)
	}
	back := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
	if back.SpanID() != spans[0].SpanContext.SpanID() || back.TraceState().Get("vendor") != "x" || !back.IsSampled() {
		t.Fatalf("properties %v; want the span's context with the client's tracestate", props)
	}
}

// A stream's segments end after so many records, when their time is up and when the
// stream ends, each with its counts.
func TestSegmentsEndByCountTimeAndClose(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.NeverSample(), segmentOptions{records: 3, interval: time.Hour})
	stream := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{5}, SpanID: trace.SpanID{6}})
	segs := tr.NewSegments("POST r", stream)
	var ids []trace.SpanID
	for range 7 {
		ids = append(ids, segs.Next(10).SpanID())
		segs.Settled(1, 0)
	}
	segs.Close()
	spans := flushed(t, tr, exp)
	if len(spans) != 3 {
		t.Fatalf("%d segment spans, want 3 (3 + 3 + 1 records)", len(spans))
	}
	for i, s := range spans {
		a := map[attribute.Key]int64{}
		for _, kv := range s.Attributes {
			a[kv.Key] = kv.Value.AsInt64()
		}
		want := []int64{3, 3, 1}[i]
		if a["bridge.segment.index"] != int64(i) || a["bridge.segment.records"] != want || a["bridge.segment.bytes"] != 10*want ||
			a["bridge.stream.records"] != int64(min(3*(i+1), 7)) || s.Parent.IsValid() || len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != stream.SpanID() ||
			s.SpanContext.SpanID() != ids[3*i] {
			t.Errorf("segment %d: %v, links %v", i, a, s.Links)
		}
	}

	// An idle stream's segment ends on time.
	tr2, exp2 := testTracing(t, sdktrace.NeverSample(), segmentOptions{records: 100, interval: 20 * time.Millisecond})
	idle := tr2.NewSegments("GET s", trace.SpanContext{})
	defer idle.Close()
	idle.Next(1)
	deadline := time.Now().Add(10 * time.Second)
	for tr2.Spans.Ended() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle stream's segment did not end on time")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if spans := flushed(t, tr2, exp2); len(spans) != 1 || spans[0].Name != "segment GET s" {
		t.Fatalf("spans %v", spans)
	}
}

func TestSamplerAndSegmentsFromTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
	if s, err := samplerFromEnv(); err != nil || !strings.Contains(s.Description(), "TraceIDRatioBased{0.1}") {
		t.Fatalf("%v %v", s, err)
	}
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "lots")
	if _, err := samplerFromEnv(); err == nil || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("error %v", err)
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "jaeger_remote")
	if _, err := samplerFromEnv(); err == nil {
		t.Fatal("an unknown sampler was accepted")
	}
}

// ParseTraceparent reads a message's context as OpenTelemetry's W3C propagator does.
func TestParseTraceparentAgreesWithThePropagator(t *testing.T) {
	const tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	cases := []map[string]string{
		{"traceparent": "00-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-00"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "vendor=a,other=b"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "not a tracestate!"},
		{"traceparent": "01-" + tid + "-" + sid + "-01-extra"},
		{"traceparent": "ff-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + strings.ToUpper(tid) + "-" + sid + "-01"},
		{"traceparent": "00-00000000000000000000000000000000-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-0000000000000000-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-01x"},
		{"traceparent": "00-" + tid + "-" + sid},
		{"traceparent": "00_" + tid + "-" + sid + "-01"},
		{"traceparent": "zz-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-0g"},
		// Flags: the random bit kept, reserved bits refused in version 00 (the propagator
		// of otel v1.47), any flags and more fields in a later version.
		{"traceparent": "00-" + tid + "-" + sid + "-02"},
		{"traceparent": "00-" + tid + "-" + sid + "-03"},
		{"traceparent": "00-" + tid + "-" + sid + "-04"},
		{"traceparent": "00-" + tid + "-" + sid + "-ff"},
		{"traceparent": "00-" + tid + "-" + sid + "-0F"},
		{"traceparent": "01-" + tid + "-" + sid + "-ff"},
		{"traceparent": "fe-" + tid + "-" + sid + "-03-x-y"},
		{"traceparent": "01-" + tid + "-" + sid + "-01x"},
		{"traceparent": "0A-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid[:31] + "--" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid[:15] + "--01"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": ""},
		{"traceparent": "", "tracestate": "vendor=a"},
		{},
	}
	// And valid ones with a character or two changed, cut or lengthened at random.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	chars := "0123456789abcdefABCDEFxg-_ "
	for range 20000 {
		b := []byte([]string{"00", "01", "fe", "ff", "0a"}[rng.IntN(5)] + "-" + tid + "-" + sid + "-" + []string{"00", "01", "02", "03", "04", "ff"}[rng.IntN(6)])
		for range rng.IntN(3) {
			b[rng.IntN(len(b))] = chars[rng.IntN(len(chars))]
		}
		switch rng.IntN(6) {
		case 0:
			b = b[:rng.IntN(len(b))]
		case 1:
			b = append(b, []string{"-", "-x", "x", "-00-01"}[rng.IntN(4)]...)
		}
		cases = append(cases, map[string]string{"traceparent": string(b)})
	}
	for _, props := range cases {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
		got, ok := ParseTraceparent(props)
		if ok != want.IsValid() || (ok && !got.Equal(want)) {
			t.Errorf("%v: %v (ok %v); the propagator: %v", props, got, ok, want)
		}
	}
}

// BenchmarkRecordSpan is a record's span at each sampling rate: the sampler's decision and
// ids always, the SDK's span (start, end, processors, OTLP encoding) for the sampled ones.
// The rows without a prefix are the bridge's pipeline (otlpwire's processor); the "sdk/"
// rows hand the same spans to the SDK's batch span processor and its official OTLP
// exporter (the transform to proto structs and proto.Marshal), the pipeline the bridge
// measured it against.
//
//	go test -run '^$' -bench BenchmarkRecordSpan -benchtime 200000x -count 3 ./telemetry
func BenchmarkRecordSpan(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64
		sdk   bool // the SDK's batch span processor and OTLP exporter
	}{{"0pct", 0, false}, {"1pct", 0.01, false}, {"10pct", 0.1, false}, {"100pct", 1, false},
		{"sdk/1pct", 0.01, true}, {"sdk/10pct", 0.1, true}, {"sdk/100pct", 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			// Both encode each batch as they would to send it, and drop it.
			var exp sdktrace.SpanExporter = &wireDiscard{}
			if c.sdk {
				var err error
				if exp, err = otlptrace.New(context.Background(), discardClient{}); err != nil {
					b.Fatal(err)
				}
			}
			sampler, err := newSampler("parentbased_traceidratio", c.ratio) // as OTEL_TRACES_SAMPLER names it
			if err != nil {
				b.Fatal(err)
			}
			tr := newTracing("v", resource.NewSchemaless(), sampler, bigSegments, nil, exp, sdktrace.WithMaxQueueSize(16384),
				sdktrace.WithMaxExportBatchSize(4096))
			defer tr.Shutdown(context.Background())
			seg := tr.NewSegments("POST r", trace.SpanContext{})
			defer seg.Close()
			props := map[string]string{}
			// The record's start: ingress takes it for every record, traced or not.
			start := time.Now()
			b.ReportAllocs()
			cpu0 := telemetrytest.ProcessCPU()
			for i := 0; b.Loop(); i++ {
				var r RecordSpan
				tr.StartPublish(&r, trace.SpanContext{}, seg.Next(1024), "persistent://public/default/t", 1024, start)
				if r.Propagates(nil) { // as ingress does, for a message without properties
					r.Inject(props)
				}
				tr.EndRecord(&r, "123:456:-1:0", nil)
				if c.ratio > 0 && i%4096 == 0 {
					_ = tr.ForceFlush(context.Background()) // measure the export too, not drops
				}
			}
			_ = tr.ForceFlush(context.Background())
			// CPU rather than time: the export runs beside the loop, on the other core.
			b.ReportMetric(float64((telemetrytest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// wireDiscard drops the requests otlpwire's processor encoded, as its exporter would
// send them.
type wireDiscard struct{}

func (*wireDiscard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (*wireDiscard) Shutdown(context.Context) error                             { return nil }
func (*wireDiscard) SendRequest(context.Context, []byte, int) (bool, error)     { return true, nil }

var _ otlpwire.Sender = (*wireDiscard)(nil)

// discardClient marshals what the OTLP exporter gives it, as a real client would, and
// drops it.
type discardClient struct{}

func (discardClient) Start(context.Context) error { return nil }
func (discardClient) Stop(context.Context) error  { return nil }
func (discardClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	_, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	return err
}

// A record span's name is made once per topic and kept for at most maxSpanNames topics;
// past that it is made for each span, still right.
func TestSpanNamesAreKeptForBoundedTopics(t *testing.T) {
	var n spanNames
	for round := range 2 {
		for i := range maxSpanNames + 50 {
			topic := fmt.Sprintf("persistent://public/default/t%d", i)
			if got, want := n.of(false, topic), "publish "+topic; got != want {
				t.Fatalf("round %d: %q, want %q", round, got, want)
			}
			if got, want := n.of(true, topic), "process "+topic; got != want {
				t.Fatalf("round %d: %q, want %q", round, got, want)
			}
		}
	}
	if got := len(*n.m.Load()); got != maxSpanNames {
		t.Fatalf("%d topics' names kept, want %d", got, maxSpanNames)
	}
	if n.of(false, "") != "publish" || n.of(true, "") != "process" {
		t.Fatal("a record without a topic is not named publish / process")
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = n.of(false, "persistent://public/default/t1") }); allocs != 0 {
		t.Fatalf("a known topic's name allocates %.0f times", allocs)
	}
}

// Inject writes what OpenTelemetry's propagator writes for the same context: random
// ids, sampled or not, with and without a tracestate; and a reused map loses an earlier
// record's tracestate.
func TestInjectAgreesWithThePropagator(t *testing.T) {
	ts, _ := trace.ParseTraceState("vendor=x,other=y")
	for i := range 2000 {
		var cfg trace.SpanContextConfig
		for j := range cfg.TraceID {
			cfg.TraceID[j] = byte(rand.Uint32())
		}
		for j := range cfg.SpanID {
			cfg.SpanID[j] = byte(rand.Uint32())
		}
		cfg.TraceID[i%16], cfg.SpanID[i%8] = byte(i), byte(i>>3) // every byte value in every place
		if !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
			continue
		}
		cfg.TraceFlags = trace.TraceFlags(i % 2)
		if i%3 == 0 {
			cfg.TraceState = ts
		}
		want := map[string]string{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg)), propagation.MapCarrier(want))
		got := map[string]string{"tracestate": "stale=1", "other": "kept"}
		(&RecordSpan{tid: cfg.TraceID, sid: cfg.SpanID, flags: cfg.TraceFlags, state: cfg.TraceState}).Inject(got)
		want["other"] = "kept"
		if !maps.Equal(got, want) {
			t.Fatalf("Inject wrote %v; the propagator %v", got, want)
		}
	}
}

// Records settled in one run with a Clock end at one reading of the time, for up to
// clockRecords of them; Stale (the settling goroutine waited) makes the next read the
// time again; a reading taken before a record began is not its end (a span never ends
// before it starts); each end is monotonic from its start.
func TestRecordsSettledInARunEndAtOneReading(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.AlwaysSample(), bigSegments)
	var c Clock
	begin := time.Now()
	end := func(topic string, start time.Time) {
		var r RecordSpan
		tr.StartPublish(&r, trace.SpanContext{}, trace.SpanContext{}, topic, 1, start)
		tr.EndRecordAt(&r, "1:2:-1:0", nil, &c)
	}
	for i := range clockRecords + 1 { // the last: a reading of its own
		end(fmt.Sprintf("run/%02d", i), begin)
		time.Sleep(50 * time.Microsecond)
	}
	c.Stale()
	end("stale", begin)
	time.Sleep(50 * time.Microsecond)
	late := time.Now() // after the clock's last reading ("stale"'s end)
	end("late", late)
	ends := map[string]time.Time{}
	for _, s := range flushed(t, tr, exp) {
		ends[strings.TrimPrefix(s.Name, "publish ")] = s.EndTime
		if s.EndTime.Before(s.StartTime) {
			t.Errorf("%s ends at %v, before its start %v", s.Name, s.EndTime, s.StartTime)
		}
	}
	first := ends["run/00"]
	for i := 1; i < clockRecords; i++ {
		if got := ends[fmt.Sprintf("run/%02d", i)]; !got.Equal(first) {
			t.Errorf("record %d of the run ends at %v, the run's first at %v: want one reading", i, got, first)
		}
	}
	next := ends[fmt.Sprintf("run/%02d", clockRecords)]
	if !next.After(first) {
		t.Errorf("record %d ends at %v, not after the first reading %v: want a new one", clockRecords, next, first)
	}
	if stale := ends["stale"]; !stale.After(next) {
		t.Errorf("after Stale a record ends at %v, not after %v: want a new reading", stale, next)
	}
	if l := ends["late"]; l.Before(late) || !l.After(ends["stale"]) {
		t.Errorf("a record begun at %v ends at %v", late, l)
	}
}

// A Clock's bound counts every record settled with it, traced or not: at 1 % a reading
// would otherwise serve a hundred times more records, and a span settled late in a long
// run would end at its start.
func TestAClocksBoundCountsUnsampledRecords(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.ParentBased(sdktrace.NeverSample()), bigSegments)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8},
		TraceFlags: trace.FlagsSampled, Remote: true})
	begin := time.Now()
	var c Clock
	var a, b RecordSpan
	tr.StartPublish(&a, parent, trace.SpanContext{}, "a", 1, begin)
	tr.StartPublish(&b, parent, trace.SpanContext{}, "b", 1, begin)
	tr.EndRecordAt(&a, "1:1:-1:0", nil, &c) // the run's reading
	for range clockRecords {
		var u RecordSpan // unsampled: no span, but settled in the run
		tr.StartPublish(&u, trace.SpanContext{}, trace.SpanContext{}, "u", 1, begin)
		if u.Recording() {
			t.Fatal("an unsampled record is recording")
		}
		tr.EndRecordAt(&u, "1:2:-1:0", nil, &c)
	}
	time.Sleep(time.Millisecond)
	tr.EndRecordAt(&b, "1:3:-1:0", nil, &c)
	ends := map[string]time.Time{}
	for _, s := range flushed(t, tr, exp) {
		ends[s.Name] = s.EndTime
	}
	if ea, eb := ends["publish a"], ends["publish b"]; ea.IsZero() || eb.Sub(ea) < time.Millisecond {
		t.Fatalf("b, settled %d records and 1 ms after a, ends at %v, a at %v: want a reading of its own", clockRecords, eb, ea)
	}
}

// A sampler that gives a child another tracestate leaves its parent's as it was: the
// span's parent context is the one the record continued.
func TestARecordsParentKeepsItsOwnTracestate(t *testing.T) {
	tr, exp := testTracing(t, restating{}, bigSegments)
	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8},
		TraceFlags: trace.FlagsSampled | trace.FlagsRandom, TraceState: ts, Remote: true})
	var r RecordSpan
	tr.StartPublish(&r, parent, trace.SpanContext{}, "t", 1, time.Now())
	tr.EndRecord(&r, "1:1:-1:0", nil)
	spans := flushed(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if got := s.Parent; !got.Equal(parent) {
		t.Errorf("the span's parent %v (tracestate %q), want %v (%q)", got, got.TraceState(), parent, parent.TraceState())
	}
	if got := s.SpanContext.TraceState().Get("me"); got != "child" {
		t.Errorf("the span's tracestate %q: want the sampler's (me=child)", s.SpanContext.TraceState())
	}
}

// restating samples every span and adds me=child to its parent's tracestate.
type restating struct{}

func (restating) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	ts, _ := trace.SpanContextFromContext(p.ParentContext).TraceState().Insert("me", "child")
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: ts}
}

func (restating) Description() string { return "restating" }
