package telemetry

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectKeepsTheSpansFlags: a record continuing a message's traceparent whose flags carry the W3C random
// bit (0x02, kept by ParseTraceparent since 184fa03, as the propagator keeps it): the
// span exported has the parent's flags (random kept, as the SDK sets them), and the
// traceparent the record's message carries should be what OpenTelemetry's propagator
// writes for that span.
func TestInjectKeepsTheSpansFlags(t *testing.T) {
	tr, exp := testTracing(t, sdktrace.ParentBased(sdktrace.AlwaysSample()), bigSegments)
	parent, ok := ParseTraceparent(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"})
	if !ok || parent.TraceFlags() != trace.FlagsSampled|trace.FlagsRandom {
		t.Fatalf("parent %v ok %v", parent, ok)
	}
	var r RecordSpan
	tr.StartPublish(&r, parent, trace.SpanContext{}, "t", 1, time.Now())
	props := map[string]string{}
	r.Inject(props)
	tr.EndRecord(&r, "1:1:-1:0", nil)
	spans := flushed(t, tr, exp)
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	want := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), spans[0].SpanContext), propagation.MapCarrier(want))
	if props["traceparent"] != want["traceparent"] {
		t.Errorf("the message carries traceparent %s; the exported span's flags are %s, which the propagator writes as %s",
			props["traceparent"], spans[0].SpanContext.TraceFlags(), want["traceparent"])
	}
}

// FuzzParseTraceparent: ParseTraceparent against the propagator on any traceparent and tracestate.
func FuzzParseTraceparent(f *testing.F) {
	const tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	f.Add("00-"+tid+"-"+sid+"-01", "a=b")
	f.Add("00-"+tid+"-"+sid+"-03-", "")
	f.Add("fe-"+tid+"-"+sid+"-ff-zz", "a=b,c=d")
	f.Add("01-"+tid+"-"+sid+"-01", "bad state!")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		for _, props := range []map[string]string{{"traceparent": tp}, {"traceparent": tp, "tracestate": ts}} {
			want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
			got, ok := ParseTraceparent(props)
			if ok != want.IsValid() || (ok && !got.Equal(want)) || (ok && got.TraceState().String() != want.TraceState().String()) {
				t.Fatalf("%q: %v (ok %v); the propagator: %v", props, got, ok, want)
			}
		}
	})
}

// TestParseTraceparentRandomDifferential: a structured randomized differential: traceparents of 50 to 60 bytes built
// from hex digits, dashes at the W3C places or not, any byte now and then, versions and
// flags of every value, and tracestates good and bad.
func TestParseTraceparentRandomDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	const hexd = "0123456789abcdefABCDEF"
	states := []string{"", "a=b", "a=b,c=d", "A=b", "a=b,,c=d", "k=" + strings.Repeat("v", 300), "x@y=z"}
	for range 300000 {
		n := 50 + rng.IntN(11)
		b := make([]byte, n)
		for i := range b {
			switch {
			case rng.IntN(200) == 0:
				b[i] = byte(rng.IntN(256))
			case (i == 2 || i == 35 || i == 52 || i == 55) && rng.IntN(50) != 0:
				b[i] = '-'
			case rng.IntN(8) == 0:
				b[i] = hexd[rng.IntN(len(hexd))]
			default:
				b[i] = hexd[rng.IntN(16)]
			}
		}
		if rng.IntN(4) == 0 {
			b[0], b[1] = '0', '0'
		}
		props := map[string]string{"traceparent": string(b)}
		if rng.IntN(2) == 0 {
			props["tracestate"] = states[rng.IntN(len(states))]
		}
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
		got, ok := ParseTraceparent(props)
		if ok != want.IsValid() || (ok && !got.Equal(want)) || (ok && got.TraceState().String() != want.TraceState().String()) {
			t.Fatalf("%q: %v (ok %v); the propagator: %v", props, got, ok, want)
		}
	}
}

// TestAppendTraceparentIsWhatInjectWrites: for a record's context without a tracestate,
// AppendTraceparent appends exactly the traceparent Inject writes (sampled, unsampled
// and propagated, random flag or not), it declines where
// Inject would write a tracestate or remove a stale one, and with tracing off.
func TestAppendTraceparentIsWhatInjectWrites(t *testing.T) {
	parents := []string{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
		"",
	}
	for _, sampler := range []sdktrace.Sampler{sdktrace.ParentBased(sdktrace.AlwaysSample()), sdktrace.ParentBased(sdktrace.NeverSample())} {
		tr, _ := testTracing(t, sampler, bigSegments)
		for _, tp := range parents {
			var parent trace.SpanContext
			if tp != "" {
				parent, _ = ParseTraceparent(map[string]string{"traceparent": tp})
			}
			var r RecordSpan
			tr.StartPublish(&r, parent, trace.SpanContext{}, "t", 1, time.Now())
			props := map[string]string{}
			r.Inject(props)
			buf := []byte("kept")
			got, ok := r.AppendTraceparent(buf, nil)
			if !ok || string(got) != "kept"+props["traceparent"] {
				t.Errorf("%s, parent %q: AppendTraceparent gave %q (ok %v); Inject wrote %q", sampler.Description(), tp, got, ok, props["traceparent"])
			}
			if _, ok := r.AppendTraceparent(nil, map[string]string{"tracestate": "a=b"}); ok {
				t.Errorf("parent %q: appended beside a stale tracestate that Inject would remove", tp)
			}
			tr.EndRecord(&r, "1:1:-1:0", nil)
		}
		withState, _ := ParseTraceparent(map[string]string{"traceparent": parents[0], "tracestate": "k=v"})
		var r RecordSpan
		tr.StartPublish(&r, withState, trace.SpanContext{}, "t", 1, time.Now())
		if _, ok := r.AppendTraceparent(nil, nil); ok {
			t.Errorf("appended a traceparent for a context with a tracestate (Inject writes both)")
		}
		tr.EndRecord(&r, "1:1:-1:0", nil)
	}
	var off RecordSpan
	if b, ok := off.AppendTraceparent(nil, nil); ok || len(b) != 0 {
		t.Fatalf("tracing off: %q, %v", b, ok)
	}
}
