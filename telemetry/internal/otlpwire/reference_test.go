package otlpwire

// The encoder as it was before its fast paths (at f3c54ea): the per-span functions of
// encode.go, renamed. TestAppendSpanBytesUnchanged holds the encoder to writing exactly
// these bytes, which the differential tests proved equal to the official exporter's
// (decoded): a byte-level check those tests, which compare decoded messages, cannot make.

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// refOpenLen appends the key of length-delimited field num and reserves room bytes for its
// length; refCloseLen writes the length once the content is appended.
func refOpenLen(b []byte, num protowire.Number, room int) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	for range room {
		b = append(b, 0)
	}
	return b, len(b)
}

// refCloseLen writes the length of the content appended since refOpenLen returned start,
// moving the content when the length needs more or fewer bytes than were reserved.
func refCloseLen(b []byte, start, room int) []byte {
	n := len(b) - start
	k := protowire.SizeVarint(uint64(n))
	if k != room {
		if k > room {
			b = append(b, make([]byte, k-room)...)
		}
		copy(b[start-room+k:], b[start:start+n])
		b = b[:start-room+k+n]
	}
	protowire.AppendVarint(b[:start-room], uint64(n))
	return b
}

// refValidUTF8 is s, or s with each invalid sequence replaced by U+FFFD: a proto3 string
// must be UTF-8 (the official exporter fails the whole batch on one that is not).
func refValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// refAppendString appends string field num unless s is empty (proto3's default).
func refAppendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return refAppendStringAlways(b, num, s)
}

func refAppendStringAlways(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, refValidUTF8(s))
}

func refAppendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func refAppendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func refAppendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

func refAppendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func refUnixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano())) // #nosec G115 -- not negative
}

func refClampUint32(v int) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(min(int64(v), math.MaxUint32))
}

// refAppendSpan appends s encoded as the content of an OTLP Span message
// (opentelemetry.proto.trace.v1.Span, without a field key or length of its own), as the
// SDK's OTLP exporter would transform it. It is the encoder's per-span entry point: any
// ReadOnlySpan, through the interface.
func refAppendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, fSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = refAppendString(b, fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, fSpanParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = refAppendString(b, fSpanName, s.Name())
	if k := int(s.SpanKind()); k > 0 && k <= maxSpanKind {
		b = refAppendUint(b, fSpanKind, uint64(k))
	}
	b = refAppendFixed64(b, fSpanStart, refUnixNano(s.StartTime()))
	b = refAppendFixed64(b, fSpanEnd, refUnixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = refAppendKeyValue(b, fSpanAttributes, kv)
	}
	b = refAppendUint(b, fSpanDroppedAttrs, refClampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var start int
		b, start = refOpenLen(b, fSpanEvents, nestedLengthReserve)
		b = refAppendFixed64(b, fEventTime, refUnixNano(ev.Time))
		b = refAppendString(b, fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = refAppendKeyValue(b, fEventAttributes, kv)
		}
		b = refAppendUint(b, fEventDroppedAttrs, refClampUint32(ev.DroppedAttributeCount))
		b = refCloseLen(b, start, nestedLengthReserve)
	}
	b = refAppendUint(b, fSpanDroppedEvents, refClampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		var start int
		b, start = refOpenLen(b, fSpanLinks, nestedLengthReserve)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendTag(b, fLinkTraceID, protowire.BytesType)
		b = protowire.AppendBytes(b, ltid[:])
		b = protowire.AppendTag(b, fLinkSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, lsid[:])
		// The official exporter leaves a link's trace_state out; so does this one.
		for _, kv := range l.Attributes {
			b = refAppendKeyValue(b, fLinkAttributes, kv)
		}
		b = refAppendUint(b, fLinkDroppedAttrs, refClampUint32(l.DroppedAttributeCount))
		b = refAppendFixed32(b, fLinkFlags, refSpanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = refCloseLen(b, start, nestedLengthReserve)
	}
	b = refAppendUint(b, fSpanDroppedLinks, refClampUint32(s.DroppedLinks()))
	// Status is always present, empty or not.
	st := s.Status()
	var start int
	b, start = refOpenLen(b, fSpanStatus, nestedLengthReserve)
	b = refAppendString(b, fStatusMessage, st.Description)
	switch st.Code {
	case codes.Ok:
		b = refAppendUint(b, fStatusCode, statusCodeOK)
	case codes.Error:
		b = refAppendUint(b, fStatusCode, statusCodeError)
	}
	b = refCloseLen(b, start, nestedLengthReserve)
	return refAppendFixed32(b, fSpanFlags, refSpanFlags(sc.TraceFlags(), parent))
}

// refSpanFlags are the W3C trace flags, and whether the parent (a link's own context for a
// link) is remote, as the official exporter builds them.
func refSpanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// refAppendKeyValue appends kv as KeyValue field num. A string or int64 value (the record
// spans' attributes) has its lengths computed before it is written; any other goes
// through refAppendKeyValueGeneral. Both write the same bytes (TestKeyValueFastPath).
func refAppendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	var anyLen int
	var sv string
	var iv uint64
	switch t := kv.Value.Type(); t {
	case attribute.STRING:
		sv = refValidUTF8(kv.Value.AsString())
		anyLen = 1 + protowire.SizeBytes(len(sv))
	case attribute.INT64:
		iv = uint64(kv.Value.AsInt64()) // #nosec G115 -- int64 is sent as its two's complement
		anyLen = 1 + protowire.SizeVarint(iv)
	default:
		return refAppendKeyValueGeneral(b, num, kv)
	}
	key := refValidUTF8(string(kv.Key))
	kvLen := 1 + protowire.SizeBytes(anyLen)
	if key != "" {
		kvLen += 1 + protowire.SizeBytes(len(key))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kvLen))
	if key != "" {
		b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
		b = protowire.AppendString(b, key)
	}
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	if kv.Value.Type() == attribute.STRING {
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		return protowire.AppendString(b, sv)
	}
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, iv)
}

// refAppendKeyValueGeneral appends kv as KeyValue field num, any value type.
func refAppendKeyValueGeneral(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	b, start := refOpenLen(b, num, nestedLengthReserve)
	b = refAppendString(b, fKVKey, string(kv.Key))
	b = refAppendAnyValue(b, fKVValue, kv.Value)
	return refCloseLen(b, start, nestedLengthReserve)
}

// refAppendAnyValue appends v as AnyValue field num: always present, its oneof member set
// even to a zero value, as the official exporter's AnyValue is.
func refAppendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	b, start := refOpenLen(b, num, nestedLengthReserve)
	switch v.Type() {
	case attribute.BOOL:
		b = refAppendBoolMember(b, v.AsBool())
	case attribute.INT64:
		b = refAppendIntMember(b, v.AsInt64())
	case attribute.FLOAT64:
		b = refAppendDoubleMember(b, v.AsFloat64())
	case attribute.STRING:
		b = refAppendStringAlways(b, fAnyString, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = refAppendArray(b, v.AsBoolSlice(), refAppendBoolMember)
	case attribute.INT64SLICE:
		b = refAppendArray(b, v.AsInt64Slice(), refAppendIntMember)
	case attribute.FLOAT64SLICE:
		b = refAppendArray(b, v.AsFloat64Slice(), refAppendDoubleMember)
	case attribute.STRINGSLICE:
		b = refAppendArray(b, v.AsStringSlice(), func(b []byte, x string) []byte { return refAppendStringAlways(b, fAnyString, x) })
	case attribute.SLICE:
		var as int
		b, as = refOpenLen(b, fAnyArray, nestedLengthReserve)
		for _, x := range v.AsSlice() {
			b = refAppendAnyValue(b, fArrayValues, x)
		}
		b = refCloseLen(b, as, nestedLengthReserve)
	case attribute.MAP:
		var as int
		b, as = refOpenLen(b, fAnyKvlist, nestedLengthReserve)
		for _, kv := range v.AsMap() {
			b = refAppendKeyValue(b, fKvlistValues, kv)
		}
		b = refCloseLen(b, as, nestedLengthReserve)
	case attribute.EMPTY:
	default:
		b = refAppendStringAlways(b, fAnyString, "INVALID")
	}
	return refCloseLen(b, start, nestedLengthReserve)
}

func refAppendBoolMember(b []byte, x bool) []byte {
	b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(x))
}

func refAppendIntMember(b []byte, x int64) []byte {
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(x)) // #nosec G115 -- int64 is sent as its two's complement
}

func refAppendDoubleMember(b []byte, x float64) []byte {
	b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(x))
}

// refAppendArray writes xs as an ArrayValue: each element an AnyValue written by member.
func refAppendArray[T any](b []byte, xs []T, member func([]byte, T) []byte) []byte {
	var as int
	b, as = refOpenLen(b, fAnyArray, nestedLengthReserve)
	for _, x := range xs {
		var vs int
		b, vs = refOpenLen(b, fArrayValues, nestedLengthReserve)
		b = member(b, x)
		b = refCloseLen(b, vs, nestedLengthReserve)
	}
	return refCloseLen(b, as, nestedLengthReserve)
}
