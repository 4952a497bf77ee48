package directspan

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type recorder struct {
	mu    sync.Mutex
	spans tracetest.SpanStubs
}

func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, tracetest.SpanStubFromReadOnlySpan(s))
	r.mu.Unlock()
}
func (r *recorder) Shutdown(context.Context) error   { return nil }
func (r *recorder) ForceFlush(context.Context) error { return nil }

// preset is what the SDK's sampler and id generator are told for one span, through its
// start context.
type presetKey struct{}

type preset struct {
	sc       trace.SpanContext
	decision sdktrace.SamplingDecision
}

type presetSampler struct{}

func (presetSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	pre := p.ParentContext.Value(presetKey{}).(preset)
	return sdktrace.SamplingResult{Decision: pre.decision, Tracestate: pre.sc.TraceState()}
}
func (presetSampler) Description() string { return "preset" }

type presetIDs struct{}

func (presetIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	pre := ctx.Value(presetKey{}).(preset)
	return pre.sc.TraceID(), pre.sc.SpanID()
}
func (presetIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	return ctx.Value(presetKey{}).(preset).sc.SpanID()
}

type codedError struct{ code int }

func (e codedError) Error() string { return fmt.Sprintf("code %d", e.code) }

// Any span — attributes of every supported type, invalid ones, repeated keys, more than
// the limit allows, values longer than it allows (multi-byte and invalid UTF-8), links
// with attributes, more links than allowed, errors of several types — made by End is the
// span the SDK's tracer makes for the same calls, under random span limits.
func TestEndMakesTheSDKsSpan(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	alphabet := []string{"a", "Z", "ü", "€", "𝄞", "\xff", "\xe2\x82", "\uFFFD", " "}
	str := func(n int) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	keys := []attribute.Key{"a", "b", "c", "d", "e", "f", ""}
	attr := func() attribute.KeyValue {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(10) {
		case 0:
			return k.Bool(rng.IntN(2) == 0)
		case 1:
			return k.Int64(rng.Int64())
		case 2:
			return k.Float64(rng.Float64())
		case 3:
			return k.StringSlice([]string{str(6), str(6)})
		case 4:
			return k.Int64Slice([]int64{rng.Int64(), 1})
		case 5:
			return attribute.KeyValue{Key: k, Value: attribute.ByteSliceValue([]byte(str(8)))}
		case 6:
			return attribute.KeyValue{Key: k} // an invalid value
		case 7:
			return k.BoolSlice([]bool{true})
		default:
			return k.String(str(12))
		}
	}
	limit := func() string { return []string{"", "0", "1", "2", "3", "5", "-1"}[rng.IntN(7)] }
	for round := range 30 {
		for _, k := range []string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT",
			"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"} {
			t.Setenv(k, limit())
		}
		limits := sdktrace.NewSpanLimits()
		res := resource.NewSchemaless(attribute.String("service.name", str(5)))
		sdkRec, directRec := &recorder{}, &recorder{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(presetSampler{}),
			sdktrace.WithIDGenerator(presetIDs{}), sdktrace.WithSpanProcessor(sdkRec))
		tracer := tp.Tracer("scope", trace.WithInstrumentationVersion("v1"))
		m, err := New([]sdktrace.SpanProcessor{directRec}, limits, res, "scope", "v1")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range 200 {
			var parent trace.SpanContext
			if rng.IntN(2) == 0 {
				ts, _ := trace.ParseTraceState(fmt.Sprintf("k=%d", rng.IntN(9)))
				parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), 1}, SpanID: trace.SpanID{byte(i), 2},
					TraceFlags: trace.TraceFlags(rng.IntN(2)), TraceState: ts, Remote: rng.IntN(2) == 0})
			}
			tid := trace.TraceID{byte(i), byte(round), 3}
			if parent.IsValid() {
				tid = parent.TraceID()
			}
			decision := []sdktrace.SamplingDecision{sdktrace.RecordAndSample, sdktrace.RecordOnly}[rng.IntN(2)]
			flags := parent.TraceFlags() &^ trace.FlagsSampled
			if decision == sdktrace.RecordAndSample {
				flags |= trace.FlagsSampled
			}
			ts, _ := trace.ParseTraceState(fmt.Sprintf("s=%d", rng.IntN(3)))
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{byte(i), byte(round), 4}, TraceFlags: flags, TraceState: ts})
			var attrs []attribute.KeyValue
			for range rng.IntN(9) {
				attrs = append(attrs, attr())
			}
			var links []trace.Link
			for range rng.IntN(4) {
				l := trace.Link{}
				if rng.IntN(4) > 0 {
					l.SpanContext = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, byte(rng.IntN(256))}, SpanID: trace.SpanID{1}})
				}
				for range rng.IntN(4) {
					l.Attributes = append(l.Attributes, attr())
				}
				links = append(links, l)
			}
			var spanErr error
			switch rng.IntN(4) {
			case 1:
				spanErr = errors.New(str(10))
			case 2:
				spanErr = codedError{rng.IntN(9)}
			case 3:
				spanErr = fmt.Errorf("wrapped: %w", codedError{1})
			}
			kind := trace.SpanKind(rng.IntN(6))
			name := str(10)
			st := start.Add(time.Duration(i) * time.Millisecond)
			end := st.Add(time.Duration(rng.IntN(1e6)))

			// Through the SDK's tracer.
			ctx := context.WithValue(context.Background(), presetKey{}, preset{sc: sc, decision: decision})
			if parent.IsValid() {
				ctx = trace.ContextWithSpanContext(ctx, parent)
			}
			_, span := tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(st))
			span.SetAttributes(attrs...)
			for _, l := range links {
				span.AddLink(l)
			}
			if spanErr != nil {
				span.RecordError(spanErr, trace.WithTimestamp(end))
				span.SetStatus(codes.Error, spanErr.Error())
			}
			span.End(trace.WithTimestamp(end))

			// Direct.
			m.End(&Span{Name: name, SpanContext: sc, Parent: parent, Kind: kind, Start: st, End: end, Err: spanErr}, attrs, links)
		}
		_ = tp.Shutdown(context.Background())
		if len(sdkRec.spans) != len(directRec.spans) || len(sdkRec.spans) != 200 {
			t.Fatalf("round %d: %d spans through the SDK, %d direct", round, len(sdkRec.spans), len(directRec.spans))
		}
		for i := range sdkRec.spans {
			if a, b := sdkRec.spans[i], directRec.spans[i]; !reflect.DeepEqual(a, b) {
				t.Fatalf("round %d (limits %+v), span %d differs:\nsdk    %+v\ndirect %+v", round, limits, i, a, b)
			}
		}
	}
}

// End keeps none of the caller's memory: changing the attributes and links it was given
// afterwards changes nothing in the span handed on.
func TestEndKeepsNoCallerMemory(t *testing.T) {
	rec := &recorder{}
	var got sdktrace.ReadOnlySpan
	m, err := New([]sdktrace.SpanProcessor{rec, spanFunc(func(s sdktrace.ReadOnlySpan) { got = s })}, sdktrace.NewSpanLimits(),
		resource.Empty(), "s", "v")
	if err != nil {
		t.Fatal(err)
	}
	attrs := []attribute.KeyValue{attribute.String("a", "x"), attribute.Int("b", 1)}
	links := []trace.Link{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}),
		Attributes: []attribute.KeyValue{attribute.String("l", "y")}}}
	m.End(&Span{Name: "n", Start: time.Now(), End: time.Now()}, attrs, links)
	want := fmt.Sprintf("%+v", tracetest.SpanStubFromReadOnlySpan(got)) // a deep copy
	attrs[0], attrs[1] = attribute.String("a", "changed"), attribute.Int("z", 2)
	links[0].Attributes[0] = attribute.String("l", "changed")
	links[0].SpanContext = trace.SpanContext{}
	if now := fmt.Sprintf("%+v", tracetest.SpanStubFromReadOnlySpan(got)); now != want {
		t.Fatalf("the span changed with its caller's slices:\nbefore %+v\nafter  %+v", want, now)
	}
}

type spanFunc func(sdktrace.ReadOnlySpan)

func (f spanFunc) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (f spanFunc) OnEnd(s sdktrace.ReadOnlySpan)                   { f(s) }
func (f spanFunc) Shutdown(context.Context) error                  { return nil }
func (f spanFunc) ForceFlush(context.Context) error                { return nil }

// copying keeps a deep copy of each span it is handed and nothing of the span itself, so
// it may say EndKeepsNoSpan: a Maker whose processors are all copying reuses its spans.
type copying struct{ recorder }

func (c *copying) OnEnd(s sdktrace.ReadOnlySpan) {
	stub := tracetest.SpanStubFromReadOnlySpan(s) // shares s's slices: copy them
	stub.Attributes = append([]attribute.KeyValue(nil), stub.Attributes...)
	stub.Links = append([]sdktrace.Link(nil), stub.Links...)
	stub.Events = append([]sdktrace.Event(nil), stub.Events...)
	if len(stub.Attributes) == 0 {
		stub.Attributes = nil
	}
	if len(stub.Links) == 0 {
		stub.Links = nil
	}
	if len(stub.Events) == 0 {
		stub.Events = nil
	}
	c.mu.Lock()
	c.spans = append(c.spans, stub)
	c.mu.Unlock()
}
func (*copying) EndKeepsNoSpan() {}

// EndShaped makes the span the SDK's tracer makes when given the shape's constants and
// the span's values in one SetAttributes: shapes whose keys are distinct and within the
// count limit (copied without deduplication, the constants cut once) and shapes that
// are not (a key twice, an empty key, more keys than the limit allows: the general
// path), values of every type, strings cut by the length limit, under random limits,
// with spans reused (every processor keeps nothing) and not.
func TestEndShapedMakesTheSDKsSpan(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	alphabet := []string{"a", "Z", "ü", "€", "𝄞", "\xff", "\xe2\x82", "\uFFFD", " "}
	str := func(n int) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	keys := []attribute.Key{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", ""}
	value := func() attribute.Value {
		switch rng.IntN(8) {
		case 0:
			return attribute.BoolValue(rng.IntN(2) == 0)
		case 1:
			return attribute.Int64Value(rng.Int64())
		case 2:
			return attribute.Float64Value(rng.Float64())
		case 3:
			return attribute.StringSliceValue([]string{str(6), str(6)})
		case 4:
			return attribute.ByteSliceValue([]byte(str(8)))
		case 5:
			return attribute.Value{} // empty
		default:
			return attribute.StringValue(str(12))
		}
	}
	limit := func() string { return []string{"", "0", "1", "2", "3", "5", "7", "-1"}[rng.IntN(8)] }
	fast, general := 0, 0
	for round := range 40 {
		for _, k := range []string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT",
			"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"} {
			t.Setenv(k, limit())
		}
		limits := sdktrace.NewSpanLimits()
		res := resource.NewSchemaless(attribute.String("service.name", "s"))
		sdkRec, plainRec, reuseRec := &recorder{}, &recorder{}, &copying{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(presetSampler{}),
			sdktrace.WithIDGenerator(presetIDs{}), sdktrace.WithSpanProcessor(sdkRec))
		tracer := tp.Tracer("scope", trace.WithInstrumentationVersion("v1"))
		plain, err := New([]sdktrace.SpanProcessor{plainRec}, limits, res, "scope", "v1")
		if err != nil {
			t.Fatal(err)
		}
		reuse, err := New([]sdktrace.SpanProcessor{reuseRec}, limits, res, "scope", "v1")
		if err != nil {
			t.Fatal(err)
		}
		if plain.Reuses() || !reuse.Reuses() {
			t.Fatal("want one Maker that reuses spans and one that does not")
		}
		// Shapes: mostly distinct keys (drawn without repeats), some with a key twice or
		// an empty one.
		type shapes struct{ plain, reuse *Shape }
		var shs []shapes
		var defs [][2][]attribute.KeyValue // consts, keys (as KeyValues with no value)
		for range 4 {
			perm := rng.Perm(len(keys) - 1)
			if rng.IntN(4) == 0 {
				perm[rng.IntN(len(perm))] = perm[0] // a key twice (or not, if it lands on 0)
			}
			if rng.IntN(6) == 0 {
				perm[rng.IntN(len(perm))] = len(keys) - 1 // the empty key
			}
			nc, nk := rng.IntN(4), rng.IntN(5)
			var consts, slots []attribute.KeyValue
			var slotKeys []attribute.Key
			for i := range nc {
				consts = append(consts, attribute.KeyValue{Key: keys[perm[i]], Value: value()})
			}
			for i := range nk {
				slots = append(slots, attribute.KeyValue{Key: keys[perm[nc+i]]})
				slotKeys = append(slotKeys, keys[perm[nc+i]])
			}
			shs = append(shs, shapes{plain.Shape(consts, slotKeys...), reuse.Shape(consts, slotKeys...)})
			defs = append(defs, [2][]attribute.KeyValue{consts, slots})
			if shs[len(shs)-1].plain.fast {
				fast++
			} else {
				general++
			}
		}
		start := time.Now()
		for i := range 200 {
			si := rng.IntN(len(shs))
			consts, slots := defs[si][0], defs[si][1]
			vals := make([]attribute.Value, rng.IntN(len(slots)+1))
			attrs := append([]attribute.KeyValue(nil), consts...)
			for j := range vals {
				vals[j] = value()
				attrs = append(attrs, attribute.KeyValue{Key: slots[j].Key, Value: vals[j]})
			}
			tid := trace.TraceID{byte(i), byte(round), 3}
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{byte(i), byte(round), 4}, TraceFlags: trace.FlagsSampled})
			var links []trace.Link
			if rng.IntN(2) == 0 {
				links = append(links, trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{1}})})
			}
			var spanErr error
			if rng.IntN(3) == 0 {
				spanErr = errors.New(str(10))
			}
			name := str(10)
			st := start.Add(time.Duration(i) * time.Millisecond)
			end := st.Add(time.Duration(rng.IntN(1e6)))

			ctx := context.WithValue(context.Background(), presetKey{}, preset{sc: sc, decision: sdktrace.RecordAndSample})
			_, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(st))
			span.SetAttributes(attrs...)
			for _, l := range links {
				span.AddLink(l)
			}
			if spanErr != nil {
				span.RecordError(spanErr, trace.WithTimestamp(end))
				span.SetStatus(codes.Error, spanErr.Error())
			}
			span.End(trace.WithTimestamp(end))

			s := Span{Name: name, SpanContext: sc, Kind: trace.SpanKindProducer, Start: st, End: end, Err: spanErr}
			plain.EndShaped(&s, shs[si].plain, vals, links)
			reuse.EndShaped(&s, shs[si].reuse, vals, links)
		}
		_ = tp.Shutdown(context.Background())
		for _, got := range []*recorder{plainRec, &reuseRec.recorder} {
			if len(sdkRec.spans) != len(got.spans) || len(sdkRec.spans) != 200 {
				t.Fatalf("round %d: %d spans through the SDK, %d direct", round, len(sdkRec.spans), len(got.spans))
			}
			for i := range sdkRec.spans {
				if a, b := sdkRec.spans[i], got.spans[i]; !reflect.DeepEqual(a, b) {
					t.Fatalf("round %d (limits %+v), span %d differs:\nsdk    %+v\ndirect %+v", round, limits, i, a, b)
				}
			}
		}
	}
	if fast == 0 || general == 0 {
		t.Fatalf("%d shapes took the fast path and %d the general one: want both", fast, general)
	}
	t.Logf("%d shapes fast, %d general", fast, general)
}
