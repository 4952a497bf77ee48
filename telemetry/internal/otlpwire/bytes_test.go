package otlpwire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// nastyString is a string from r of 0 to ~300 bytes mixing ASCII, multi-byte runes,
// invalid bytes and cut sequences, so each of the encoder's string paths (ASCII 16 and 8
// bytes at a time and the tail, valid UTF-8, invalid) and each varint length size is taken.
func nastyString(r *rand.Rand) string {
	pieces := []string{"a", "messaging.", "0123456789abcdef", "é", "日本", "\u00a0", "\xff", "\xc3", "\xe2\x82", "\x80", "\x7f", "\x00", "\U0001F600"}
	var sb strings.Builder
	n := r.IntN(6)
	if r.IntN(4) == 0 {
		n = r.IntN(60)
	}
	for range n {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

// nastySpans are randomSpans with their strings (names, keys, values, status and event
// names) replaced, some with invalid UTF-8, and the record span's shapes.
func nastySpans(r *rand.Rand, n int) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range randomSpans(r, n) {
		if s == nil {
			out = append(out, nil)
			continue
		}
		st := tracetest.SpanStubFromReadOnlySpan(s)
		if r.IntN(2) == 0 {
			st.Name = nastyString(r)
		}
		for i := range st.Attributes {
			if r.IntN(2) == 0 {
				st.Attributes[i] = attribute.String(nastyString(r), nastyString(r))
			}
		}
		st.Attributes = append(st.Attributes, attribute.Int64("n", r.Int64()-r.Int64()), attribute.Int64("small", int64(r.IntN(300))),
			attribute.Bool(nastyString(r), r.IntN(2) == 0), attribute.Float64(nastyString(r), r.NormFloat64()))
		if r.IntN(3) == 0 {
			st.Status = sdktrace.Status{Code: codes.Code(r.IntN(4)), Description: nastyString(r)}
		}
		for i := range st.Events {
			st.Events[i].Name = nastyString(r)
		}
		if r.IntN(4) == 0 { // a large span: lengths past one and two bytes
			st.Attributes = append(st.Attributes, attribute.String("big", strings.Repeat("x", r.IntN(20000))))
		}
		out = append(out, st.Snapshot())
	}
	return out
}

// The encoder writes exactly the bytes it wrote before its fast paths (reference_test.go),
// for every kind of span the differential tests use and for strings that are not UTF-8:
// the differential tests compare decoded messages, this compares bytes.
func TestAppendSpanBytesUnchanged(t *testing.T) {
	spans := append(mixedSpans(t), recordSpans(3)...)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for range 300 {
		spans = append(spans, nastySpans(r, 1+r.IntN(8))...)
	}
	for i, s := range spans {
		if s == nil {
			continue
		}
		got, want := AppendSpan([]byte{1, 2}, s), refAppendSpan([]byte{1, 2}, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("span %d (%q): encoded\n%x\nbefore the fast paths\n%x", i, s.Name(), got, want)
		}
	}
}

// FuzzAppendSpanBytes: a span of the fuzzer's name, key, value and numbers is encoded
// to the same bytes as before the fast paths.
func FuzzAppendSpanBytes(f *testing.F) {
	f.Add("publish t", "messaging.system", "pulsar", int64(1024), uint8(3))
	f.Add("\xff", "", "\xc3\x28", int64(-1), uint8(255))
	f.Fuzz(func(t *testing.T, name, key, value string, n int64, flags uint8) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{flags, 1}, SpanID: trace.SpanID{2}, TraceFlags: trace.TraceFlags(flags),
			Remote: flags&4 != 0})
		st := tracetest.SpanStub{Name: name, SpanContext: sc, Parent: sc, SpanKind: trace.SpanKind(flags % 7),
			StartTime: time.Unix(0, n), EndTime: time.Unix(0, n/2),
			Attributes: []attribute.KeyValue{attribute.String(key, value), attribute.Int64(value, n), attribute.Bool(key, n&1 == 0),
				attribute.Float64(name, math.Float64frombits(uint64(n))), attribute.StringSlice(key, []string{value, name})}, // #nosec G115
			Events:            []sdktrace.Event{{Name: value, Attributes: []attribute.KeyValue{attribute.String(name, key)}, DroppedAttributeCount: int(n % 3)}},
			Links:             []sdktrace.Link{{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.Int64(key, n)}}},
			Status:            sdktrace.Status{Code: codes.Code(flags % 4), Description: value},
			DroppedAttributes: int(flags), DroppedLinks: int(n & 0xffff)}
		s := st.Snapshot()
		got, want := AppendSpan(nil, s), refAppendSpan(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded\n%x\nbefore the fast paths\n%x", got, want)
		}
	})
}

// The Processor's attribute cache (kvCache) changes no byte: spans whose string
// attributes repeat by position (hits), differ in one byte at the same lengths, are not
// UTF-8, empty, long, of other types, or more than the cache holds, encoded one after
// another with one cache, each as the encoder before its fast paths writes it.
func TestKVCacheBytesUnchanged(t *testing.T) {
	keys := []string{"messaging.system", "messaging.systen", "k", "", "k\xff", "日本", strings.Repeat("k", 130)}
	vals := []string{"pulsar", "pulsas", "", "v\xc3", "é", strings.Repeat("v", 60), strings.Repeat("v", 140)}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var c kvCache
	hits := 0
	for i := range 3000 {
		n := r.IntN(11)
		attrs := make([]attribute.KeyValue, n)
		for j := range attrs {
			switch r.IntN(8) {
			case 0:
				attrs[j] = attribute.Int64(keys[r.IntN(len(keys))], r.Int64N(300))
			case 1:
				attrs[j] = attribute.StringSlice(keys[r.IntN(len(keys))], []string{vals[r.IntN(len(vals))]})
			default:
				attrs[j] = attribute.String(keys[r.IntN(2)], vals[r.IntN(2)]) // mostly the same few
				if r.IntN(4) == 0 {
					attrs[j] = attribute.String(keys[r.IntN(len(keys))], vals[r.IntN(len(vals))])
				}
			}
		}
		s := tracetest.SpanStub{Name: "s", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i)}, SpanID: trace.SpanID{1}}),
			Attributes: attrs}.Snapshot()
		before := c
		got, want := appendSpan([]byte{5}, s, &c), refAppendSpan([]byte{5}, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("span %d, attributes %v: with the cache\n%x\nbefore the fast paths\n%x", i, attrs, got, want)
		}
		for j := range min(n, len(c)) {
			if len(before[j].enc) > 0 && attrs[j].Value.Type() == attribute.STRING &&
				bytes.Equal(before[j].enc, appendKeyValue(nil, fSpanAttributes, &attrs[j])) {
				hits++
			}
		}
	}
	if hits < 1000 {
		t.Fatalf("only %d attributes written from the cache: the test does not test it", hits)
	}
}
