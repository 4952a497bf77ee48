package otlpwire

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

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

// openLen appends the key of length-delimited field num and reserves room bytes for its
// length; closeLen writes the length once the content is appended.
func openLen(b []byte, num protowire.Number, room int) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	for range room {
		b = append(b, 0)
	}
	return b, len(b)
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
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
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

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
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
func AppendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, fSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, fSpanParentSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	if k := int(s.SpanKind()); k > 0 && k <= maxSpanKind {
		b = appendUint(b, fSpanKind, uint64(k))
	}
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	b = appendUint(b, fSpanDroppedAttrs, clampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		var start int
		b, start = openLen(b, fSpanEvents, nestedLengthReserve)
		b = appendFixed64(b, fEventTime, unixNano(ev.Time))
		b = appendString(b, fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, fEventAttributes, kv)
		}
		b = appendUint(b, fEventDroppedAttrs, clampUint32(ev.DroppedAttributeCount))
		b = closeLen(b, start, nestedLengthReserve)
	}
	b = appendUint(b, fSpanDroppedEvents, clampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		var start int
		b, start = openLen(b, fSpanLinks, nestedLengthReserve)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendTag(b, fLinkTraceID, protowire.BytesType)
		b = protowire.AppendBytes(b, ltid[:])
		b = protowire.AppendTag(b, fLinkSpanID, protowire.BytesType)
		b = protowire.AppendBytes(b, lsid[:])
		// The official exporter leaves a link's trace_state out; so does this one.
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, fLinkAttributes, kv)
		}
		b = appendUint(b, fLinkDroppedAttrs, clampUint32(l.DroppedAttributeCount))
		b = appendFixed32(b, fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = closeLen(b, start, nestedLengthReserve)
	}
	b = appendUint(b, fSpanDroppedLinks, clampUint32(s.DroppedLinks()))
	// Status is always present, empty or not.
	st := s.Status()
	var start int
	b, start = openLen(b, fSpanStatus, nestedLengthReserve)
	b = appendString(b, fStatusMessage, st.Description)
	switch st.Code {
	case codes.Ok:
		b = appendUint(b, fStatusCode, statusCodeOK)
	case codes.Error:
		b = appendUint(b, fStatusCode, statusCodeError)
	}
	b = closeLen(b, start, nestedLengthReserve)
	return appendFixed32(b, fSpanFlags, spanFlags(sc.TraceFlags(), parent))
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

// appendKeyValue appends kv as KeyValue field num. A string or int64 value (the record
// spans' attributes) has its lengths computed before it is written; any other goes
// through appendKeyValueGeneral. Both write the same bytes (TestKeyValueFastPath).
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	var anyLen int
	var sv string
	var iv uint64
	switch t := kv.Value.Type(); t {
	case attribute.STRING:
		sv = validUTF8(kv.Value.AsString())
		anyLen = 1 + protowire.SizeBytes(len(sv))
	case attribute.INT64:
		iv = uint64(kv.Value.AsInt64()) // #nosec G115 -- int64 is sent as its two's complement
		anyLen = 1 + protowire.SizeVarint(iv)
	default:
		return appendKeyValueGeneral(b, num, kv)
	}
	key := validUTF8(string(kv.Key))
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
		b = appendArray(b, v.AsBoolSlice(), appendBoolMember)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), appendIntMember)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), appendDoubleMember)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), func(b []byte, x string) []byte { return appendStringAlways(b, fAnyString, x) })
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
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fKvlistValues, kv)
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
		b = appendKeyValue(b, fResAttributes, it.Attribute())
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
		b = appendKeyValue(b, fScopeAttributes, it.Attribute())
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

// appendArray writes xs as an ArrayValue: each element an AnyValue written by member.
func appendArray[T any](b []byte, xs []T, member func([]byte, T) []byte) []byte {
	var as int
	b, as = openLen(b, fAnyArray, nestedLengthReserve)
	for _, x := range xs {
		var vs int
		b, vs = openLen(b, fArrayValues, nestedLengthReserve)
		b = member(b, x)
		b = closeLen(b, vs, nestedLengthReserve)
	}
	return closeLen(b, as, nestedLengthReserve)
}
