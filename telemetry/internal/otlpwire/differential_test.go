package otlpwire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// sdkSpans are spans made by the SDK's own tracer: limits that drop attributes, events
// and links, every kind, local and remote parents, events, links, statuses.
func sdkSpans(t testing.TB) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.37.0",
		attribute.String("service.name", "bridge-test"), attribute.Int64("pid", 42))
	limits := sdktrace.NewSpanLimits()
	limits.AttributeCountLimit = 4
	limits.EventCountLimit = 2
	limits.LinkCountLimit = 1
	limits.AttributePerEventCountLimit = 1
	limits.AttributePerLinkCountLimit = 1
	limits.AttributeValueLengthLimit = 8
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(rec), sdktrace.WithRawSpanLimits(limits))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("scope/a", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL("https://example.com/s"),
		trace.WithInstrumentationAttributes(attribute.String("lib", "x")))
	other := tp.Tracer("scope/b")

	ctx, root := tr.Start(context.Background(), "root", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("long", "a value longer than eight"), attribute.Bool("b", true)))
	for i, kind := range []trace.SpanKind{trace.SpanKindUnspecified, trace.SpanKindInternal, trace.SpanKindClient,
		trace.SpanKindProducer, trace.SpanKindConsumer} {
		_, s := other.Start(ctx, "child "+strconv.Itoa(i), trace.WithSpanKind(kind))
		s.SetAttributes(attribute.Int("i", i), attribute.Int("j", i), attribute.Int("k", i), attribute.Int("l", i), attribute.Int("m", i))
		s.AddEvent("e1", trace.WithAttributes(attribute.String("x", "1"), attribute.String("y", "2")))
		s.AddEvent("e2")
		s.AddEvent("e3 dropped")
		if i%2 == 0 {
			s.RecordError(errors.New("boom"))
			s.SetStatus(codes.Error, "it failed")
		} else {
			s.SetStatus(codes.Ok, "ignored for ok")
		}
		s.End()
	}
	ts, err := trace.ParseTraceState("vendor=value,other=x")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	rctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	_, s := tr.Start(rctx, "remote child", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(
		trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("a", "1"), attribute.String("b", "2")}},
		trace.Link{SpanContext: root.SpanContext()}))
	s.End()
	root.End()
	return rec.Ended()
}

var (
	resA     = resource.NewWithAttributes("https://schema/a", attribute.String("service.name", "a"), attribute.StringSlice("list", []string{"x", "y"}))
	resASame = resource.NewWithAttributes("https://schema/other", attribute.String("service.name", "a"), attribute.StringSlice("list", []string{"x", "y"}))
	resB     = resource.NewSchemaless(attribute.String("service.name", "b"))
	resEmpty = resource.Empty()
)

// everyValue is an attribute of every type, with empty and extreme values.
func everyValue() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.Bool("bool.true", true), attribute.Bool("bool.false", false),
		attribute.Int64("int.zero", 0), attribute.Int64("int.neg", -1), attribute.Int64("int.max", math.MaxInt64), attribute.Int64("int.min", math.MinInt64),
		attribute.Float64("f.zero", 0), attribute.Float64("f.negzero", math.Copysign(0, -1)), attribute.Float64("f.inf", math.Inf(1)),
		attribute.Float64("f.small", math.SmallestNonzeroFloat64),
		attribute.String("s", "héllo"), attribute.String("s.empty", ""), attribute.String("", "empty key"),
		attribute.ByteSlice("bytes", []byte{0, 1, 255}), attribute.ByteSlice("bytes.empty", nil),
		attribute.BoolSlice("bools", []bool{true, false}), attribute.BoolSlice("bools.empty", nil),
		attribute.Int64Slice("ints", []int64{0, -5, math.MaxInt64}), attribute.Int64Slice("ints.empty", []int64{}),
		attribute.Float64Slice("floats", []float64{0, 1.5, -2}), attribute.Float64Slice("floats.empty", nil),
		attribute.StringSlice("strings", []string{"", "a", "ü"}), attribute.StringSlice("strings.empty", nil),
		attribute.Slice("slice", attribute.StringValue("x"), attribute.Int64Value(7), attribute.BoolSliceValue([]bool{true}),
			attribute.SliceValue(attribute.Float64Value(1)), attribute.MapValue(attribute.String("k", "v"))),
		attribute.Slice("slice.empty"),
		attribute.Map("map", attribute.String("k", "v"), attribute.Int64("n", 1), attribute.Map("inner", attribute.Bool("deep", true))),
		attribute.Map("map.empty"),
		{Key: "empty.value"},
		{Key: "long.string", Value: attribute.StringValue(string(make([]byte, 300)))},
	}
}

// stubSpans are snapshots covering every field the OTLP span has, spread over several
// resources (two with the same attributes and different schema URLs, which the official
// exporter puts together under the first's) and scopes, with a nil span among them.
func stubSpans(t testing.TB) []sdktrace.ReadOnlySpan {
	ts, err := trace.ParseTraceState("k1=v1,k2=v2")
	if err != nil {
		t.Fatal(err)
	}
	sc := func(tid, sid byte, flags trace.TraceFlags, remote bool, ts trace.TraceState) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{tid, 1}, SpanID: trace.SpanID{sid, 2},
			TraceFlags: flags, Remote: remote, TraceState: ts})
	}
	scopeFull := instrumentation.Scope{Name: "full", Version: "v9", SchemaURL: "https://scope/schema",
		Attributes: attribute.NewSet(attribute.String("sa", "1"), attribute.Int64Slice("sb", []int64{1, 2}))}
	scopeName := instrumentation.Scope{Name: "name-only"}
	start := time.Unix(1700000000, 123456789)
	stubs := []tracetest.SpanStub{
		{
			Name: "everything", SpanContext: sc(1, 1, trace.FlagsSampled, false, ts), Parent: sc(1, 9, trace.FlagsSampled, true, trace.TraceState{}),
			SpanKind: trace.SpanKindServer, StartTime: start, EndTime: start.Add(time.Millisecond), Attributes: everyValue(),
			Events: []sdktrace.Event{
				{Name: "ev", Time: start.Add(time.Microsecond), Attributes: everyValue(), DroppedAttributeCount: 3},
				{Name: "", Time: time.Time{}},
			},
			Links: []sdktrace.Link{
				{SpanContext: sc(2, 2, trace.FlagsSampled, true, ts), Attributes: []attribute.KeyValue{attribute.String("l", "1")}, DroppedAttributeCount: 2},
				{SpanContext: sc(3, 3, 0, false, trace.TraceState{})},
				{},
			},
			Status:            sdktrace.Status{Code: codes.Error, Description: "bad things"},
			DroppedAttributes: 5, DroppedEvents: 6, DroppedLinks: 7, ChildSpanCount: 2,
			Resource: resA, InstrumentationScope: scopeFull,
		},
		{Name: "ok", SpanContext: sc(4, 4, trace.FlagsSampled|trace.TraceFlags(0x02), false, trace.TraceState{}),
			Parent: sc(4, 5, trace.FlagsSampled, false, trace.TraceState{}), SpanKind: trace.SpanKindClient,
			Status: sdktrace.Status{Code: codes.Ok}, Resource: resASame, InstrumentationScope: scopeFull, StartTime: start, EndTime: start},
		{Name: "unsampled", SpanContext: sc(5, 5, 0, false, trace.TraceState{}), SpanKind: trace.SpanKindProducer, Resource: resB,
			InstrumentationScope: scopeName, DroppedAttributes: math.MaxInt32, EndTime: time.Unix(-5, 0)},
		{Name: "no resource", SpanContext: sc(6, 6, trace.FlagsSampled, false, trace.TraceState{}), SpanKind: trace.SpanKind(42)},
		{Name: "empty resource", SpanContext: sc(7, 7, trace.FlagsSampled, false, trace.TraceState{}), SpanKind: trace.SpanKindConsumer,
			Resource: resEmpty, Status: sdktrace.Status{Code: codes.Unset, Description: "unset with text"}},
		{Name: "back to a", SpanContext: sc(8, 8, trace.FlagsSampled, false, trace.TraceState{}), SpanKind: trace.SpanKindInternal,
			Resource: resA, InstrumentationScope: scopeName},
		{Name: "a, full again", SpanContext: sc(9, 9, trace.FlagsSampled, false, trace.TraceState{}), Resource: resA, InstrumentationScope: scopeFull},
		{Name: "b again", SpanContext: sc(10, 10, trace.FlagsSampled, false, trace.TraceState{}), Resource: resB, InstrumentationScope: scopeFull},
	}
	spans := make([]sdktrace.ReadOnlySpan, 0, len(stubs)+1)
	for i, s := range stubs {
		spans = append(spans, s.Snapshot())
		if i == 2 {
			spans = append(spans, nil)
		}
	}
	return spans
}

func requireEqual(t testing.TB, official, wire *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	o, w := normalised(t, official), normalised(t, wire)
	if !proto.Equal(o, w) {
		t.Fatalf("the wire exporter's request differs from the official one's:\nofficial: %s\nwire:     %s", prototext.Format(o), prototext.Format(w))
	}
	if len(o.ResourceSpans) == 0 {
		t.Fatal("nothing exported: the comparison proves nothing")
	}
}

// firstSeenOrder checks the wire request's resources come in the order the batch first
// names them (its own documented order; the official one's is a map's).
func firstSeenOrder(t testing.TB, spans []sdktrace.ReadOnlySpan, wire *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	var want []attribute.Distinct
	seen := map[attribute.Distinct]bool{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		if k := s.Resource().Equivalent(); !seen[k] {
			seen[k] = true
			want = append(want, k)
		}
	}
	if len(wire.ResourceSpans) != len(want) {
		t.Fatalf("%d ResourceSpans, want %d", len(wire.ResourceSpans), len(want))
	}
	for i, rs := range wire.ResourceSpans {
		first := firstWith(spans, want[i])
		if got, want := len(rs.GetResource().GetAttributes()), first.Resource().Len(); got != want {
			t.Fatalf("ResourceSpans %d has %d attributes; the %d-th resource seen has %d", i, got, i, want)
		}
		if rs.SchemaUrl != first.Resource().SchemaURL() {
			t.Fatalf("ResourceSpans %d schema %q, want %q", i, rs.SchemaUrl, first.Resource().SchemaURL())
		}
		if rs.ScopeSpans[0].Spans[0].Name != first.Name() {
			t.Fatalf("ResourceSpans %d starts with %q, want %q", i, rs.ScopeSpans[0].Spans[0].Name, first.Name())
		}
	}
}

func firstWith(spans []sdktrace.ReadOnlySpan, k attribute.Distinct) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s != nil && s.Resource().Equivalent() == k {
			return s
		}
	}
	return nil
}

// The contract: for the same spans, the wire exporter's OTLP/HTTP request decodes to the
// official exporter's.
func TestDifferentialHTTP(t *testing.T) {
	c := newCapture(t)
	p := newHTTPPair(t, c)
	for name, spans := range map[string][]sdktrace.ReadOnlySpan{"sdk": sdkSpans(t), "stubs": stubSpans(t)} {
		t.Run(name, func(t *testing.T) {
			off, wire := bodiesHTTP(t, c, p, spans)
			requireEqual(t, off, wire)
			firstSeenOrder(t, spans, wire)
		})
	}
}

// The same over gRPC, against an in-process gRPC collector.
func TestDifferentialGRPC(t *testing.T) {
	c := newGRPCCapture(t)
	p := newGRPCPair(t, c)
	for name, spans := range map[string][]sdktrace.ReadOnlySpan{"sdk": sdkSpans(t), "stubs": stubSpans(t)} {
		t.Run(name, func(t *testing.T) {
			off, wire := bodiesGRPC(t, c, p, spans)
			requireEqual(t, off, wire)
			firstSeenOrder(t, spans, wire)
		})
	}
}

// The official exporter fails a whole batch with a string that is not UTF-8; the wire
// exporter sends it with U+FFFD for each bad sequence, and the rest as the official one
// would have sent the batch with that replacement made.
func TestInvalidUTF8IsReplaced(t *testing.T) {
	c := newCapture(t)
	p := newHTTPPair(t, c)
	bad := tracetest.SpanStub{Name: "bad\xff", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}),
		Attributes: []attribute.KeyValue{attribute.String("k\xfe", "v\xc3"), attribute.StringSlice("s", []string{"ok", "\x80"})}, Resource: resB}
	fixed := bad
	fixed.Name = "bad\uFFFD"
	fixed.Attributes = []attribute.KeyValue{attribute.String("k\uFFFD", "v\uFFFD"), attribute.StringSlice("s", []string{"ok", "\uFFFD"})}
	if err := p.official.ExportSpans(exportCtx(t), []sdktrace.ReadOnlySpan{bad.Snapshot()}); err == nil {
		t.Fatal("the official exporter sent invalid UTF-8: this difference is gone, drop the replacement")
	}
	c.take()
	off, _ := bodiesHTTP(t, c, p, []sdktrace.ReadOnlySpan{fixed.Snapshot()})
	if err := p.wire.ExportSpans(exportCtx(t), []sdktrace.ReadOnlySpan{bad.Snapshot()}); err != nil {
		t.Fatal(err)
	}
	got := c.take()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	requireEqual(t, off, decode(t, got[0].body))
}

// randomSpans makes n spans from r: random ids, flags, kinds, times, names (some not
// ASCII), attributes of every type, events, links, statuses and drop counts, over a few
// resources and scopes.
func randomSpans(r *rand.Rand, n int) []sdktrace.ReadOnlySpan {
	resources := []*resource.Resource{nil, resource.Empty(), resA, resASame, resB,
		resource.NewWithAttributes("s", attribute.Int64("r", r.Int64()))}
	scopes := []instrumentation.Scope{{}, {Name: "a"}, {Name: "a", Version: "1"}, {Name: "b", SchemaURL: "u",
		Attributes: attribute.NewSet(attribute.Bool("x", r.IntN(2) == 0))}}
	str := func() string {
		const alphabet = "abcXYZ09 _-.é日本\u00a0"
		rs := []rune(alphabet)
		b := make([]rune, r.IntN(12))
		for i := range b {
			b[i] = rs[r.IntN(len(rs))]
		}
		return string(b)
	}
	var value func(depth int) attribute.Value
	value = func(depth int) attribute.Value {
		k := r.IntN(12)
		if depth > 2 && k >= 9 {
			k = r.IntN(9)
		}
		switch k {
		case 0:
			return attribute.BoolValue(r.IntN(2) == 0)
		case 1:
			return attribute.Int64Value(r.Int64() - r.Int64())
		case 2:
			return attribute.Float64Value(r.NormFloat64() * 1e6)
		case 3:
			return attribute.StringValue(str())
		case 4:
			b := make([]byte, r.IntN(5))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return attribute.ByteSliceValue(b)
		case 5:
			v := make([]bool, r.IntN(3))
			for i := range v {
				v[i] = r.IntN(2) == 0
			}
			return attribute.BoolSliceValue(v)
		case 6:
			v := make([]int64, r.IntN(3))
			for i := range v {
				v[i] = int64(r.Uint64())
			}
			return attribute.Int64SliceValue(v)
		case 7:
			v := make([]float64, r.IntN(3))
			for i := range v {
				v[i] = r.Float64()
			}
			return attribute.Float64SliceValue(v)
		case 8:
			v := make([]string, r.IntN(3))
			for i := range v {
				v[i] = str()
			}
			return attribute.StringSliceValue(v)
		case 9:
			v := make([]attribute.Value, r.IntN(3))
			for i := range v {
				v[i] = value(depth + 1)
			}
			return attribute.SliceValue(v...)
		case 10:
			v := make([]attribute.KeyValue, r.IntN(3))
			for i := range v {
				v[i] = attribute.KeyValue{Key: attribute.Key(str()), Value: value(depth + 1)}
			}
			return attribute.MapValue(v...)
		}
		return attribute.Value{}
	}
	attrs := func(max int) []attribute.KeyValue {
		v := make([]attribute.KeyValue, r.IntN(max+1))
		for i := range v {
			v[i] = attribute.KeyValue{Key: attribute.Key(str()), Value: value(0)}
		}
		return v
	}
	sc := func() trace.SpanContext {
		var tid trace.TraceID
		var sid trace.SpanID
		if r.IntN(10) > 0 {
			for i := range tid {
				tid[i] = byte(r.IntN(256))
			}
		}
		if r.IntN(10) > 0 {
			for i := range sid {
				sid[i] = byte(r.IntN(256))
			}
		}
		var ts trace.TraceState
		if r.IntN(3) == 0 {
			ts, _ = ts.Insert("k"+strconv.Itoa(r.IntN(9)), "v"+strconv.Itoa(r.IntN(99)))
		}
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(r.IntN(256)),
			TraceState: ts, Remote: r.IntN(2) == 0})
	}
	tm := func() time.Time {
		if r.IntN(8) == 0 {
			return time.Time{}
		}
		return time.Unix(0, r.Int64N(1<<62))
	}
	spans := make([]sdktrace.ReadOnlySpan, 0, n)
	for i := range n {
		if i > 0 && r.IntN(50) == 0 { // a nil span among others (a batch of nil spans sends nothing)
			spans = append(spans, nil)
			continue
		}
		s := tracetest.SpanStub{Name: str(), SpanContext: sc(), SpanKind: trace.SpanKind(r.IntN(7)), StartTime: tm(), EndTime: tm(),
			Attributes: attrs(6), DroppedAttributes: r.IntN(3) * r.IntN(1<<20), DroppedEvents: r.IntN(2), DroppedLinks: r.IntN(2) * 300,
			Resource: resources[r.IntN(len(resources))], InstrumentationScope: scopes[r.IntN(len(scopes))]}
		if r.IntN(2) == 0 {
			s.Parent = sc()
		}
		for range r.IntN(3) {
			s.Events = append(s.Events, sdktrace.Event{Name: str(), Time: tm(), Attributes: attrs(3), DroppedAttributeCount: r.IntN(2)})
		}
		for range r.IntN(3) {
			s.Links = append(s.Links, sdktrace.Link{SpanContext: sc(), Attributes: attrs(3), DroppedAttributeCount: r.IntN(2)})
		}
		s.Status = sdktrace.Status{Code: codes.Code(r.IntN(4)), Description: str()}
		spans = append(spans, s.Snapshot())
	}
	return spans
}

// The randomized differential test: many random batches, both transports; the seed is
// printed and taken from OTLPWIRE_SEED to replay a failure.
func TestDifferentialRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OTLPWIRE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("OTLPWIRE_SEED=%d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	hc := newCapture(t)
	hp := newHTTPPair(t, hc)
	gc := newGRPCCapture(t)
	gp := newGRPCPair(t, gc)
	batches := 150
	if testing.Short() {
		batches = 30
	}
	for i := range batches {
		spans := randomSpans(r, 1+r.IntN(40))
		if i%2 == 0 {
			off, wire := bodiesHTTP(t, hc, hp, spans)
			requireEqual(t, off, wire)
			firstSeenOrder(t, spans, wire)
		} else {
			off, wire := bodiesGRPC(t, gc, gp, spans)
			requireEqual(t, off, wire)
			firstSeenOrder(t, spans, wire)
		}
	}
}

// fuzzHarness is one collector and pair of exporters for every fuzz input.
var fuzzHarness struct {
	c *capture
	p pair
}

// FuzzDifferential derives a batch from the fuzzer's seed and length and compares the
// two exporters' requests.
func FuzzDifferential(f *testing.F) {
	f.Add(uint64(1), uint8(1))
	f.Add(uint64(99), uint8(30))
	c := newCapture(f)
	fuzzHarness.c, fuzzHarness.p = c, newHTTPPair(f, c)
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		spans := randomSpans(rand.New(rand.NewPCG(seed, uint64(n))), 1+int(n%64))
		off, wire := bodiesHTTP(t, fuzzHarness.c, fuzzHarness.p, spans)
		requireEqual(t, off, wire)
	})
}

// Encode's result is one valid message whatever the sizes: lengths that need more bytes
// than were reserved (a span past 16 KiB, a batch past 2 MiB) move the content right.
func TestEncodeLengthsPastTheirReserve(t *testing.T) {
	big := make([]byte, 20000)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	var spans []sdktrace.ReadOnlySpan
	for i := range 150 {
		spans = append(spans, tracetest.SpanStub{Name: fmt.Sprint("big ", i), Attributes: []attribute.KeyValue{attribute.String("big", string(big))},
			Resource: resB}.Snapshot())
	}
	var e Encoder
	m := decode(t, e.Encode(spans))
	if n := len(m.ResourceSpans[0].ScopeSpans[0].Spans); n != 150 {
		t.Fatalf("%d spans decoded", n)
	}
	if v := m.ResourceSpans[0].ScopeSpans[0].Spans[149].Attributes[0].Value.GetStringValue(); v != string(big) {
		t.Fatalf("the last span's attribute is %d bytes", len(v))
	}
	// And smaller again: the buffer is reused, the lengths fit in fewer bytes than reserved.
	small := []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "s"}.Snapshot()}
	if m := decode(t, e.Encode(small)); m.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "s" {
		t.Fatalf("%v", m)
	}
}
