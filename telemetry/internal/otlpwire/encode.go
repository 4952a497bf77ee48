package otlpwire

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the OTLP messages (opentelemetry/proto/{collector/trace,trace,common,resource}/v1).
const (
	fReqResourceSpans = 1

	fRSResource   = 1
	fRSScopeSpans = 2
	fRSSchemaURL  = 3

	fSSScope     = 1
	fSSSpans     = 2
	fSSSchemaURL = 3

	fResAttributes = 1

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID        = 1
	fSpanSpanID         = 2
	fSpanTraceState     = 3
	fSpanParentSpanID   = 4
	fSpanName           = 5
	fSpanKind           = 6
	fSpanStart          = 7
	fSpanEnd            = 8
	fSpanAttributes     = 9
	fSpanDroppedAttrs   = 10
	fSpanEvents         = 11
	fSpanDroppedEvents  = 12
	fSpanLinks          = 13
	fSpanDroppedLinks   = 14
	fSpanStatus         = 15
	fSpanFlags          = 16
	fStatusMessage      = 2
	fStatusCode         = 3
	fEventTime          = 1
	fEventName          = 2
	fEventAttributes    = 3
	fEventDroppedAttrs  = 4
	fLinkTraceID        = 1
	fLinkSpanID         = 2
	fLinkAttributes     = 4
	fLinkDroppedAttrs   = 5
	fLinkFlags          = 6
	fKVKey              = 1
	fKVValue            = 2
	fAnyString          = 1
	fAnyBool            = 2
	fAnyInt             = 3
	fAnyDouble          = 4
	fAnyArray           = 5
	fAnyKvlist          = 6
	fAnyBytes           = 7
	fArrayValues        = 1
	fKvlistValues       = 1
	flagHasIsRemote     = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagIsRemote        = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
	statusCodeOK        = 1
	statusCodeError     = 2
	maxSpanKind         = int(trace.SpanKindConsumer)
	outerLengthReserve  = 3 // bytes kept for a ResourceSpans' or ScopeSpans' length: up to 2 MiB without a move
	spanLengthReserve   = 2 // up to 16 KiB
	nestedLengthReserve = 1
)

// Field keys (tag bytes) of the fields this file writes most: a field number below 16
// and its wire type in one byte, written as a constant rather than through
// protowire.AppendTag. fSpanFlags (16) takes two bytes: tagSpanFlags0, tagSpanFlags1.
const (
	tagSpanTraceID      = fSpanTraceID<<3 | byte(protowire.BytesType)
	tagSpanSpanID       = fSpanSpanID<<3 | byte(protowire.BytesType)
	tagSpanTraceState   = fSpanTraceState<<3 | byte(protowire.BytesType)
	tagSpanParentSpanID = fSpanParentSpanID<<3 | byte(protowire.BytesType)
	tagSpanName         = fSpanName<<3 | byte(protowire.BytesType)
	tagSpanKind         = fSpanKind<<3 | byte(protowire.VarintType)
	tagSpanStart        = fSpanStart<<3 | byte(protowire.Fixed64Type)
	tagSpanEnd          = fSpanEnd<<3 | byte(protowire.Fixed64Type)
	tagSpanDroppedAttrs = fSpanDroppedAttrs<<3 | byte(protowire.VarintType)
	tagSpanEvents       = fSpanEvents<<3 | byte(protowire.BytesType)
	tagSpanDroppedEvs   = fSpanDroppedEvents<<3 | byte(protowire.VarintType)
	tagSpanLinks        = fSpanLinks<<3 | byte(protowire.BytesType)
	tagSpanDroppedLinks = fSpanDroppedLinks<<3 | byte(protowire.VarintType)
	tagSpanStatus       = fSpanStatus<<3 | byte(protowire.BytesType)
	tagSpanFlags0       = (fSpanFlags<<3|byte(protowire.Fixed32Type))&0x7f | 0x80
	tagSpanFlags1       = fSpanFlags >> 4
	tagStatusMessage    = fStatusMessage<<3 | byte(protowire.BytesType)
	tagStatusCode       = fStatusCode<<3 | byte(protowire.VarintType)
	tagEventTime        = fEventTime<<3 | byte(protowire.Fixed64Type)
	tagEventName        = fEventName<<3 | byte(protowire.BytesType)
	tagEventDropped     = fEventDroppedAttrs<<3 | byte(protowire.VarintType)
	tagLinkTraceID      = fLinkTraceID<<3 | byte(protowire.BytesType)
	tagLinkSpanID       = fLinkSpanID<<3 | byte(protowire.BytesType)
	tagLinkDropped      = fLinkDroppedAttrs<<3 | byte(protowire.VarintType)
	tagLinkFlags        = fLinkFlags<<3 | byte(protowire.Fixed32Type)
	tagKVKey            = fKVKey<<3 | byte(protowire.BytesType)
	tagKVValue          = fKVValue<<3 | byte(protowire.BytesType)
	tagAnyString        = fAnyString<<3 | byte(protowire.BytesType)
	tagAnyBool          = fAnyBool<<3 | byte(protowire.VarintType)
	tagAnyInt           = fAnyInt<<3 | byte(protowire.VarintType)
	tagAnyDouble        = fAnyDouble<<3 | byte(protowire.Fixed64Type)
)

// lenTag is the one-byte key of length-delimited field num (below 16).
func lenTag(num protowire.Number) byte { return byte(num)<<3 | byte(protowire.BytesType) }

// appendVarint is protowire.AppendVarint, small enough to be inlined.
func appendVarint(b []byte, v uint64) []byte {
	for ; v >= 1<<7; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

// putVarint writes v as a varint at the start of d, which has room for it, and returns
// its size.
func putVarint(d []byte, v uint64) int {
	if v < 1<<7 {
		d[0] = byte(v)
		return 1
	}
	i := 0
	for ; v >= 1<<7; i++ {
		d[i] = byte(v) | 0x80
		v >>= 7
	}
	d[i] = byte(v)
	return i + 1
}

// sizeVarint is protowire.SizeVarint with the one-byte case inlined.
func sizeVarint(v uint64) int {
	if v < 1<<7 {
		return 1
	}
	return protowire.SizeVarint(v)
}

// openLen appends the key of length-delimited field num and reserves room bytes for its
// length; closeLen writes the length once the content is appended.
func openLen(b []byte, num protowire.Number, room int) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	for range room {
		b = append(b, 0)
	}
	return b, len(b)
}

// openLen1 is openLen with one byte of room, for a field number below 16 (tag).
func openLen1(b []byte, tag byte) ([]byte, int) {
	b = append(b, tag, 0)
	return b, len(b)
}

// closeLen1 is closeLen for openLen1.
func closeLen1(b []byte, start int) []byte {
	if n := len(b) - start; n < 1<<7 {
		b[start-1] = byte(n)
		return b
	}
	return closeLen(b, start, 1)
}

// closeLen writes the length of the content appended since openLen returned start,
// moving the content when the length needs more or fewer bytes than were reserved.
func closeLen(b []byte, start, room int) []byte {
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

// validUTF8 is s, or s with each invalid sequence replaced by U+FFFD: a proto3 string
// must be UTF-8 (the official exporter fails the whole batch on one that is not).
func validUTF8(s string) string {
	if isASCII(s) {
		return s
	}
	return validUTF8NotASCII(s)
}

func validUTF8NotASCII(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// isASCII reports whether s is all ASCII (so valid UTF-8), 8 bytes at a time, the last
// 8 (or 4, or the 1 to 3 left) read overlapping what came before: most strings a span
// has are ASCII.
func isASCII(s string) bool {
	p := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	n := len(p)
	var x uint64
	switch {
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			x |= binary.LittleEndian.Uint64(p[i:])
		}
		x |= binary.LittleEndian.Uint64(p[n-8:])
	case n >= 4:
		x = uint64(binary.LittleEndian.Uint32(p) | binary.LittleEndian.Uint32(p[n-4:]))
	case n > 0:
		x = uint64(p[0] | p[n/2] | p[n-1])
	}
	return x&0x8080808080808080 == 0
}

// appendString appends string field num unless s is empty (proto3's default).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendStringAlways(b, num, s)
}

func appendStringAlways(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, validUTF8(s))
}

// appendStr appends a string field of key tag unless s is empty; s must be valid UTF-8
// (validUTF8).
func appendStr(b []byte, tag byte, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, tag)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendVarintField appends a varint field of key tag unless v is 0.
func appendVarintField(b []byte, tag byte, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(append(b, tag), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

// appendFixed64Field appends a fixed64 field of key tag unless v is 0.
func appendFixed64Field(b []byte, tag byte, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(append(b, tag), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func unixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano())) // #nosec G115 -- not negative
}

func clampUint32(v int) uint64 {
	if v < 0 {
		return 0
	}
	return uint64(min(int64(v), math.MaxUint32))
}

// AppendSpan appends s encoded as the content of an OTLP Span message
// (opentelemetry.proto.trace.v1.Span, without a field key or length of its own), as the
// SDK's OTLP exporter would transform it. It is the encoder's per-span entry point: any
// ReadOnlySpan, through the interface.
//
// It writes exactly the bytes it wrote before its fast paths (reference_test.go).
func AppendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	return appendSpan(b, s, nil)
}

// appendSpan is AppendSpan, with the string attributes of the span taken from c when
// it has them (nil: none).
func appendSpan(b []byte, s sdktrace.ReadOnlySpan, c *kvCache) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, tagSpanTraceID, byte(len(tid)))
	b = append(b, tid[:]...)
	b = append(b, tagSpanSpanID, byte(len(sid)))
	b = append(b, sid[:]...)
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendStr(b, tagSpanTraceState, validUTF8(ts.String()))
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = append(b, tagSpanParentSpanID, byte(len(psid)))
		b = append(b, psid[:]...)
	}
	name := s.Name()
	if !isASCII(name) { // validUTF8, a call fewer
		name = validUTF8NotASCII(name)
	}
	b = appendStr(b, tagSpanName, name)
	if k := s.SpanKind(); k > 0 && int(k) <= maxSpanKind {
		b = append(b, tagSpanKind, byte(k))
	}
	b = appendFixed64Field(b, tagSpanStart, unixNano(s.StartTime()))
	b = appendFixed64Field(b, tagSpanEnd, unixNano(s.EndTime()))
	attrs := s.Attributes()
	for i := range attrs {
		if c != nil && i < len(c) && attrs[i].Value.Type() == attribute.STRING {
			b = c[i].append(b, &attrs[i])
			continue
		}
		b = appendKeyValue(b, fSpanAttributes, &attrs[i])
	}
	b = appendVarintField(b, tagSpanDroppedAttrs, clampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var start int
		b, start = openLen1(b, tagSpanEvents)
		b = appendFixed64Field(b, tagEventTime, unixNano(ev.Time))
		b = appendStr(b, tagEventName, validUTF8(ev.Name))
		for i := range ev.Attributes {
			b = appendKeyValue(b, fEventAttributes, &ev.Attributes[i])
		}
		b = appendVarintField(b, tagEventDropped, clampUint32(ev.DroppedAttributeCount))
		b = closeLen1(b, start)
	}
	b = appendVarintField(b, tagSpanDroppedEvs, clampUint32(s.DroppedEvents()))
	links := s.Links()
	for i := range links {
		b = appendLink(b, &links[i])
	}
	b = appendVarintField(b, tagSpanDroppedLinks, clampUint32(s.DroppedLinks()))
	// Status is always present, empty or not.
	st := s.Status()
	if st.Description == "" && st.Code != codes.Ok && st.Code != codes.Error {
		b = append(b, tagSpanStatus, 0)
	} else {
		var start int
		b, start = openLen1(b, tagSpanStatus)
		b = appendStr(b, tagStatusMessage, validUTF8(st.Description))
		switch st.Code {
		case codes.Ok:
			b = append(b, tagStatusCode, statusCodeOK)
		case codes.Error:
			b = append(b, tagStatusCode, statusCodeError)
		}
		b = closeLen1(b, start)
	}
	b = append(b, tagSpanFlags0, tagSpanFlags1)
	return binary.LittleEndian.AppendUint32(b, spanFlags(sc.TraceFlags(), parent))
}

// appendLink appends l as a Span's Link field.
func appendLink(b []byte, l *sdktrace.Link) []byte {
	var start int
	b, start = openLen1(b, tagSpanLinks)
	ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
	b = append(b, tagLinkTraceID, byte(len(ltid)))
	b = append(b, ltid[:]...)
	b = append(b, tagLinkSpanID, byte(len(lsid)))
	b = append(b, lsid[:]...)
	// The official exporter leaves a link's trace_state out; so does this one.
	for i := range l.Attributes {
		b = appendKeyValue(b, fLinkAttributes, &l.Attributes[i])
	}
	b = appendVarintField(b, tagLinkDropped, clampUint32(l.DroppedAttributeCount))
	b = append(b, tagLinkFlags)
	b = binary.LittleEndian.AppendUint32(b, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
	return closeLen1(b, start)
}

// kvCache holds, for each of a span's first attributes by position, the encoding of
// the last string attribute encoded there: a record span's attributes come in the same
// order each time, most with the same key and value (messaging.system and the like), and
// one whose key and value are those of the encoding is written by copying it, without
// UTF-8 validation or lengths. It holds encoded bytes only (copies), and is used by one
// goroutine at a time (the Processor's scratch).
type kvCache [8]kvEntry

// kvEntry is a span attribute's KeyValue field of a string value, key, length and all,
// under 130 bytes, as appendKeyValue writes it; key and value (both non-empty, both
// valid UTF-8 so as given) at enc[4:4+k] and enc[8+k:], k = len(key).
type kvEntry struct {
	enc []byte
}

// append appends kv, a string attribute, as appendKeyValue would: the entry's bytes
// when kv's key and value are the entry's, or else encoded, and then remembered if the
// encoding is one an entry can hold.
func (e *kvEntry) append(b []byte, kv *attribute.KeyValue) []byte {
	key, val := string(kv.Key), kv.Value.AsString()
	if n := len(e.enc); n > 0 && len(key) == int(e.enc[3]) && n == len(key)+len(val)+8 &&
		string(e.enc[4:4+len(key)]) == key && string(e.enc[8+len(key):]) == val {
		return append(b, e.enc...)
	}
	start := len(b)
	b = appendKeyValue(b, fSpanAttributes, kv)
	enc := b[start:]
	// Kept when written as given (valid UTF-8: the same bytes) with one-byte lengths.
	if n := len(enc); key != "" && val != "" && n < 130 && n == len(key)+len(val)+8 &&
		string(enc[4:4+len(key)]) == key && string(enc[8+len(key):]) == val {
		e.enc = append(e.enc[:0], enc...)
	} else {
		e.enc = e.enc[:0]
	}
	return b
}

// spanFlags are the W3C trace flags, and whether the parent (a link's own context for a
// link) is remote, as the official exporter builds them.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// appendKeyValue appends kv as KeyValue field num (below 16). A value of a scalar type
// or a string (the record spans' attributes) has its lengths computed before it is
// written; any other goes through appendKeyValueGeneral. Both write the same bytes
// (TestKeyValueFastPath).
func appendKeyValue(b []byte, num protowire.Number, kvp *attribute.KeyValue) []byte {
	kv := *kvp
	var anyLen int
	var sv string
	var iv uint64
	t := kv.Value.Type()
	switch t {
	case attribute.STRING:
		if sv = kv.Value.AsString(); !isASCII(sv) { // validUTF8, a call fewer
			sv = validUTF8NotASCII(sv)
		}
		anyLen = 1 + sizeVarint(uint64(len(sv))) + len(sv)
	case attribute.INT64:
		iv = uint64(kv.Value.AsInt64()) // #nosec G115 -- int64 is sent as its two's complement
		anyLen = 1 + sizeVarint(iv)
	case attribute.BOOL:
		iv = protowire.EncodeBool(kv.Value.AsBool())
		anyLen = 2
	case attribute.FLOAT64:
		iv = math.Float64bits(kv.Value.AsFloat64())
		anyLen = 9
	default:
		return appendKeyValueGeneral(b, num, kv)
	}
	key := string(kv.Key)
	if !isASCII(key) {
		key = validUTF8NotASCII(key)
	}
	kvLen := 1 + sizeVarint(uint64(anyLen)) + anyLen
	if key != "" {
		kvLen += 1 + sizeVarint(uint64(len(key))) + len(key)
	}
	// Every length known: the field is written into room made once.
	off := len(b)
	if kvLen < 1<<7 { // and so every length inside it: each one byte
		b = slices.Grow(b, 2+kvLen)[:off+2+kvLen]
		d := b[off:]
		d[0], d[1] = lenTag(num), byte(kvLen)
		i := 2
		if key != "" {
			d[2], d[3] = tagKVKey, byte(len(key))
			i = 4 + copy(d[4:], key)
		}
		d[i], d[i+1] = tagKVValue, byte(anyLen)
		writeAnyValue(d[i+2:], t, sv, iv)
		return b
	}
	n := 1 + sizeVarint(uint64(kvLen)) + kvLen
	b = slices.Grow(b, n)[:off+n]
	d := b[off:]
	d[0] = lenTag(num)
	i := 1 + putVarint(d[1:], uint64(kvLen))
	if key != "" {
		d[i] = tagKVKey
		i++
		i += putVarint(d[i:], uint64(len(key)))
		i += copy(d[i:], key)
	}
	d[i] = tagKVValue
	i++
	i += putVarint(d[i:], uint64(anyLen))
	writeAnyValue(d[i:], t, sv, iv)
	return b
}

// writeAnyValue writes the content of an AnyValue of type t (STRING: sv; INT64, BOOL,
// FLOAT64: iv as appendKeyValue makes it) into d, which is exactly its size.
func writeAnyValue(d []byte, t attribute.Type, sv string, iv uint64) {
	switch t {
	case attribute.STRING:
		d[0] = tagAnyString
		copy(d[1+putVarint(d[1:], uint64(len(sv))):], sv)
	case attribute.INT64:
		d[0] = tagAnyInt
		putVarint(d[1:], iv)
	case attribute.BOOL:
		d[0], d[1] = tagAnyBool, byte(iv)
	default:
		d[0] = tagAnyDouble
		binary.LittleEndian.PutUint64(d[1:], iv)
	}
}

// appendKeyValueGeneral appends kv as KeyValue field num, any value type.
func appendKeyValueGeneral(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	b, start := openLen(b, num, nestedLengthReserve)
	b = appendString(b, fKVKey, string(kv.Key))
	b = appendAnyValue(b, fKVValue, kv.Value)
	return closeLen(b, start, nestedLengthReserve)
}

// appendAnyValue appends v as AnyValue field num: always present, its oneof member set
// even to a zero value, as the official exporter's AnyValue is.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	b, start := openLen(b, num, nestedLengthReserve)
	switch v.Type() {
	case attribute.BOOL:
		b = appendBoolMember(b, v.AsBool())
	case attribute.INT64:
		b = appendIntMember(b, v.AsInt64())
	case attribute.FLOAT64:
		b = appendDoubleMember(b, v.AsFloat64())
	case attribute.STRING:
		b = appendStringAlways(b, fAnyString, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, fAnyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice())
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice())
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice())
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice())
	case attribute.SLICE:
		var as int
		b, as = openLen(b, fAnyArray, nestedLengthReserve)
		for _, x := range v.AsSlice() {
			b = appendAnyValue(b, fArrayValues, x)
		}
		b = closeLen(b, as, nestedLengthReserve)
	case attribute.MAP:
		var as int
		b, as = openLen(b, fAnyKvlist, nestedLengthReserve)
		m := v.AsMap()
		for i := range m {
			b = appendKeyValue(b, fKvlistValues, &m[i])
		}
		b = closeLen(b, as, nestedLengthReserve)
	case attribute.EMPTY:
	default:
		b = appendStringAlways(b, fAnyString, "INVALID")
	}
	return closeLen(b, start, nestedLengthReserve)
}

func appendBoolMember(b []byte, x bool) []byte {
	b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeBool(x))
}

func appendIntMember(b []byte, x int64) []byte {
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(x)) // #nosec G115 -- int64 is sent as its two's complement
}

func appendDoubleMember(b []byte, x float64) []byte {
	b = protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(x))
}

// groupKey is how the official exporter groups spans: by the resource's attribute set,
// then by the whole instrumentation scope.
type groupKey struct {
	res   attribute.Distinct
	scope instrumentation.Scope
}

// scopeGroup is the spans of one resource and scope, in the order given.
type scopeGroup struct {
	key   groupKey
	spans []int
}

// resourceGroup is a resource (the first of the batch's spans with its attribute set)
// and its scopes, in the order they first appear.
type resourceGroup struct {
	key    attribute.Distinct
	res    *resource.Resource
	scopes []int // indexes into Encoder.scopes
}

// Encoder encodes ExportTraceServiceRequest messages into a buffer it reuses. It is not
// safe for concurrent use.
type Encoder struct {
	buf       []byte
	resources []resourceGroup
	scopes    []scopeGroup
	byKey     map[groupKey]int // scope group index, once a batch has more than a few groups
}

// manyGroups is the number of scope groups past which they are looked up in a map.
const manyGroups = 8

// Encode encodes spans as an ExportTraceServiceRequest, grouped by resource and
// instrumentation scope as the official exporter groups them; resources in the order
// they first appear, scopes of a resource in the order they first appear, spans in the
// order given (nil ones skipped). The result is valid until the next call.
func (e *Encoder) Encode(spans []sdktrace.ReadOnlySpan) []byte {
	e.group(spans)
	b := e.buf[:0]
	for ri := range e.resources {
		rg := &e.resources[ri]
		var rs int
		b, rs = openLen(b, fReqResourceSpans, outerLengthReserve)
		b = appendResource(b, rg.res)
		for _, si := range rg.scopes {
			sg := &e.scopes[si]
			var ss int
			b, ss = openLen(b, fRSScopeSpans, outerLengthReserve)
			b = appendScope(b, sg.key.scope)
			for _, i := range sg.spans {
				var start int
				b, start = openLen(b, fSSSpans, spanLengthReserve)
				b = AppendSpan(b, spans[i])
				b = closeLen(b, start, spanLengthReserve)
			}
			b = appendString(b, fSSSchemaURL, sg.key.scope.SchemaURL)
			b = closeLen(b, ss, outerLengthReserve)
		}
		b = appendString(b, fRSSchemaURL, rg.res.SchemaURL())
		b = closeLen(b, rs, outerLengthReserve)
	}
	e.buf = b
	// Nothing of the caller's batch is kept past the call: the groups' keys hold its
	// resources' and scopes' attribute sets.
	for i := range e.scopes {
		e.scopes[i].key = groupKey{}
	}
	for i := range e.resources {
		e.resources[i].key, e.resources[i].res = attribute.Distinct{}, nil
	}
	clear(e.byKey)
	return b
}

// appendResource appends a ResourceSpans' resource field (none for a nil resource).
func appendResource(b []byte, res *resource.Resource) []byte {
	if res == nil {
		return b
	}
	var start int
	b, start = openLen(b, fRSResource, nestedLengthReserve)
	for it := res.Iter(); it.Next(); {
		kv := it.Attribute()
		b = appendKeyValue(b, fResAttributes, &kv)
	}
	return closeLen(b, start, nestedLengthReserve)
}

// appendScope appends a ScopeSpans' scope field (none for the zero scope).
func appendScope(b []byte, sc instrumentation.Scope) []byte {
	if sc == (instrumentation.Scope{}) {
		return b
	}
	var start int
	b, start = openLen(b, fSSScope, nestedLengthReserve)
	b = appendString(b, fScopeName, sc.Name)
	b = appendString(b, fScopeVersion, sc.Version)
	for it := sc.Attributes.Iter(); it.Next(); {
		kv := it.Attribute()
		b = appendKeyValue(b, fScopeAttributes, &kv)
	}
	return closeLen(b, start, nestedLengthReserve)
}

// group sorts the spans' indexes into e.resources and e.scopes.
func (e *Encoder) group(spans []sdktrace.ReadOnlySpan) {
	for i := range e.scopes {
		e.scopes[i].spans = e.scopes[i].spans[:0]
	}
	e.scopes = e.scopes[:0]
	for i := range e.resources {
		e.resources[i].scopes = e.resources[i].scopes[:0]
		e.resources[i].res = nil
	}
	e.resources = e.resources[:0]
	clear(e.byKey)
	last := -1
	var lastRes *resource.Resource
	for i, s := range spans {
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		// The common case: the same resource (pointer: the same attribute set) and scope as
		// the span before, told without comparing the resource's attributes.
		if last >= 0 && res == lastRes && scope == e.scopes[last].key.scope {
			e.scopes[last].spans = append(e.scopes[last].spans, i)
			continue
		}
		k := groupKey{res: res.Equivalent(), scope: scope}
		gi := -1
		switch {
		case last >= 0 && e.scopes[last].key == k:
			gi = last
		case len(e.scopes) > manyGroups:
			if g, ok := e.byKey[k]; ok {
				gi = g
			}
		default:
			for j := range e.scopes {
				if e.scopes[j].key == k {
					gi = j
					break
				}
			}
		}
		if gi < 0 {
			gi = e.newScopeGroup(k, res)
		}
		e.scopes[gi].spans = append(e.scopes[gi].spans, i)
		last, lastRes = gi, res
	}
}

func (e *Encoder) newScopeGroup(k groupKey, res *resource.Resource) int {
	gi := len(e.scopes)
	if gi < cap(e.scopes) {
		e.scopes = e.scopes[:gi+1]
		e.scopes[gi].key = k
	} else {
		e.scopes = append(e.scopes, scopeGroup{key: k})
	}
	if len(e.scopes) > manyGroups {
		if e.byKey == nil {
			e.byKey = make(map[groupKey]int)
		}
		if len(e.byKey) == 0 {
			for j := range e.scopes {
				e.byKey[e.scopes[j].key] = j
			}
		} else {
			e.byKey[k] = gi
		}
	}
	ri := -1
	for j := range e.resources {
		if e.resources[j].key == k.res {
			ri = j
			break
		}
	}
	if ri < 0 {
		ri = len(e.resources)
		if ri < cap(e.resources) {
			e.resources = e.resources[:ri+1]
			e.resources[ri].key, e.resources[ri].res = k.res, res
		} else {
			e.resources = append(e.resources, resourceGroup{key: k.res, res: res})
		}
	}
	e.resources[ri].scopes = append(e.resources[ri].scopes, gi)
	return gi
}

// appendArray writes xs as an ArrayValue: each element an AnyValue. (A type switch
// rather than a func value per type: a func value would make AppendSpan's buffer escape,
// and the Processor encodes into one on its stack.)
func appendArray[T bool | int64 | float64 | string](b []byte, xs []T) []byte {
	var as int
	b, as = openLen(b, fAnyArray, nestedLengthReserve)
	for _, x := range xs {
		var vs int
		b, vs = openLen(b, fArrayValues, nestedLengthReserve)
		switch x := any(x).(type) {
		case bool:
			b = appendBoolMember(b, x)
		case int64:
			b = appendIntMember(b, x)
		case float64:
			b = appendDoubleMember(b, x)
		case string:
			b = appendStringAlways(b, fAnyString, x)
		}
		b = closeLen(b, vs, nestedLengthReserve)
	}
	return closeLen(b, as, nestedLengthReserve)
}
