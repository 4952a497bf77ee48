package telemetry

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// RecordSpans makes the per-record spans: "publish <topic>" for each record of a sampled
// ingress stream, "process <topic>" for each delivered message of a sampled trace.
//
// They are ordinary OTLP spans — the same name, kind, parent, attributes and status an
// SDK span would have, exported through the same OTLP client as the SDK's spans — but made
// without the SDK: a record's span is a fixed-shape value carried in the record's own
// bookkeeping, queued when the record settles and encoded by one goroutine straight into
// reused OTLP messages. Through the SDK every record's span cost about 10 µs of CPU
// (span start, attribute copies, the end-of-span snapshot, the OTLP transform, garbage);
// this way it costs a small fraction of that.
//
// A publish span is sampled exactly when its stream's span is: every standard sampler
// (parentbased_*, traceidratio on the same trace id, always_on/off) decides a child like
// its parent, so no sampler runs per record. A process span is made here when the
// message carries a sampled context and the sampler follows a sampled parent
// (Tracing.ChildFollowsParent); egress leaves the other cases to the SDK.
//
// Like the SDK's batch span processor, spans wait in a bounded queue (OTEL_BSP_MAX_QUEUE_SIZE,
// default 16384) and leave in batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, default 4096) when a
// batch is full or every OTEL_BSP_SCHEDULE_DELAY (default 5 s); a span that finds the queue
// full is dropped and counted, never waited for. Export errors go to the global
// OpenTelemetry error handler, as the SDK's do.
type RecordSpans struct {
	client   otlptrace.Client
	resource *resourcepb.Resource
	scope    *commonpb.InstrumentationScope
	maxQueue int
	maxBatch int
	delay    time.Duration
	timeout  time.Duration

	mu    sync.Mutex
	queue []RecordSpan
	kick  chan struct{} // a batch is ready
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	dropped  atomic.Int64
	exported atomic.Int64

	// Owned by the export goroutine.
	spare  []RecordSpan
	topics map[topicKey]*topicWire
	raw    []byte // the encoded spans of a batch
	span   []byte // one encoded span
	req    []*tracepb.ResourceSpans
	rs     tracepb.ResourceSpans
	ss     tracepb.ScopeSpans
}

// RecordSpan is one record's span (publish or process) between its start and End. It is
// a small value: keep it in the record's bookkeeping, not behind a pointer of its own.
type RecordSpan struct {
	parent     *SpanParent
	link       *SpanLink // process spans only
	spanID     trace.SpanID
	start, end int64 // Unix nanoseconds
	topic      string
	size       int64
	messageID  string
	failure    *spanFailure
}

type spanFailure struct{ message, typ string }

// SpanContext is the span's own context, as the message carries it.
func (s *RecordSpan) SpanContext() trace.SpanContext {
	ts, _ := trace.ParseTraceState(s.parent.traceState)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: s.parent.traceID, SpanID: s.spanID, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// SpanParent is what the spans of one stream's records share: their parent, the stream's
// span. Make it once per stream with NewParent.
type SpanParent struct {
	traceID    trace.TraceID
	spanID     trace.SpanID
	remote     bool // the parent came from another process
	traceState string
	header     [55]byte // the traceparent value, the span id to be filled in
}

// ParentFromProperties reads the W3C trace context a message carries in its properties
// (traceparent, tracestate) as the parent of its process span, without the propagator's
// context allocations. ok is false when there is none or it is malformed; sampled says
// whether its producer sampled it.
func ParentFromProperties(props map[string]string) (p *SpanParent, sampled, ok bool) {
	tp := props["traceparent"]
	// version "00" is exactly 55 characters; a later version may append fields.
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || (tp[:2] == "00" && len(tp) != 55) || tp[:2] == "ff" ||
		(len(tp) > 55 && tp[55] != '-') {
		return nil, false, false
	}
	var ver, flags [1]byte
	if _, err := hex.Decode(ver[:], []byte(tp[:2])); err != nil {
		return nil, false, false
	}
	p = &SpanParent{remote: true}
	if _, err := hex.Decode(p.traceID[:], []byte(tp[3:35])); err != nil || !p.traceID.IsValid() || !isLowerHex(tp[3:52]) {
		return nil, false, false
	}
	if _, err := hex.Decode(p.spanID[:], []byte(tp[36:52])); err != nil || !p.spanID.IsValid() {
		return nil, false, false
	}
	if _, err := hex.Decode(flags[:], []byte(tp[53:55])); err != nil {
		return nil, false, false
	}
	if st := props["tracestate"]; st != "" {
		ts, _ := trace.ParseTraceState(st) // as OpenTelemetry's propagator: a bad one is dropped
		p.traceState = ts.String()
	}
	return p, flags[0]&1 == 1, true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// SpanLink is what the process spans of one egress stream share: a link to the stream's
// response span, and the subscription. Make it once per stream with NewLink.
type SpanLink struct {
	traceID trace.TraceID
	spanID  trace.SpanID
	flags   uint32
	group   string
}

// NewLink describes sc (the egress response span) for the process spans of a stream
// reading subscription.
func NewLink(sc trace.SpanContext, subscription string) *SpanLink {
	l := &SpanLink{traceID: sc.TraceID(), spanID: sc.SpanID(), group: subscription,
		flags: uint32(sc.TraceFlags()) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)}
	if sc.IsRemote() {
		l.flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return l
}

// NewParent describes sc (the stream's sampled span) as the parent of record spans.
func NewParent(sc trace.SpanContext) *SpanParent {
	p := &SpanParent{traceID: sc.TraceID(), spanID: sc.SpanID(), remote: sc.IsRemote()}
	if ts := sc.TraceState(); ts.Len() > 0 {
		p.traceState = ts.String()
	}
	b := &p.header
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], p.traceID[:])
	b[35] = '-'
	b[52], b[53], b[54] = '-', '0', '1'
	return p
}

// recordSpanOptions are the OTEL_BSP_* settings the queue honours.
type recordSpanOptions struct {
	maxQueue, maxBatch int
	delay, timeout     time.Duration
}

func newRecordSpans(client otlptrace.Client, res *resource.Resource, version string, o recordSpanOptions) *RecordSpans {
	r := &RecordSpans{
		client:   client,
		resource: &resourcepb.Resource{Attributes: attrsPB(res.Attributes())},
		scope:    &commonpb.InstrumentationScope{Name: instrumentationName, Version: version},
		maxQueue: o.maxQueue,
		maxBatch: min(o.maxBatch, o.maxQueue),
		delay:    o.delay,
		timeout:  o.timeout,
		kick:     make(chan struct{}, 1),
		flush:    make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		topics:   map[topicKey]*topicWire{},
	}
	r.queue = make([]RecordSpan, 0, r.maxBatch)
	r.spare = make([]RecordSpan, 0, r.maxBatch)
	r.rs.SchemaUrl = res.SchemaURL()
	r.ss.Scope = r.scope
	r.ss.SchemaUrl = semconv.SchemaURL
	r.rs.Resource = r.resource
	r.rs.ScopeSpans = []*tracepb.ScopeSpans{&r.ss}
	r.req = []*tracepb.ResourceSpans{&r.rs}
	go r.run()
	return r
}

// Start begins the publish span of one record sent to topic: a child of parent (the
// stream's span, which must be sampled), starting at start. It writes the span's W3C
// context into props as traceparent (and tracestate, when the parent has one), so the
// consumers of the message continue the trace.
func (r *RecordSpans) Start(parent *SpanParent, topic string, size int64, start time.Time, props map[string]string) RecordSpan {
	s := RecordSpan{parent: parent, spanID: newSpanID(), start: start.UnixNano(), topic: topic, size: size}
	b := parent.header // 00-<trace id>-<span id>-01
	hex.Encode(b[36:52], s.spanID[:])
	props["traceparent"] = string(b[:])
	if parent.traceState != "" {
		props["tracestate"] = parent.traceState
	}
	return s
}

// StartProcess begins the process span of one message delivered to an egress client:
// a child of parent (the message's sampled context, from its properties), linked to the
// stream's response span. End it with the message's id once the record is written.
func (r *RecordSpans) StartProcess(parent *SpanParent, link *SpanLink, topic string, size int64, start time.Time) RecordSpan {
	s := RecordSpan{parent: parent, link: link, spanID: newSpanID(), start: start.UnixNano(), topic: topic, size: size}
	return s
}

// newSpanID is a random, valid (non-zero) span id.
func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (8 * i))
		}
	}
	return id
}

// End ends s: the record was persisted as messageID, or failed with err. The span is
// queued for export (or dropped and counted if the queue is full); s may be reused.
func (r *RecordSpans) End(s *RecordSpan, messageID string, err error) {
	s.end = time.Now().UnixNano()
	s.messageID = messageID
	if err != nil {
		s.failure = &spanFailure{message: err.Error(), typ: reflect.TypeOf(err).String()}
	}
	r.mu.Lock()
	if len(r.queue) >= r.maxQueue {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	r.queue = append(r.queue, *s)
	ready := len(r.queue) == r.maxBatch
	r.mu.Unlock()
	if ready {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Dropped is how many spans found the queue full.
func (r *RecordSpans) Dropped() int64 { return r.dropped.Load() }

// Exported is how many spans the OTLP client accepted.
func (r *RecordSpans) Exported() int64 { return r.exported.Load() }

// ForceFlush exports every queued span before it returns (or ctx ends).
func (r *RecordSpans) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case r.flush <- ack:
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops the export goroutine. Spans ended after it
// are dropped. It does not stop the OTLP client, which the SDK's exporter shares.
func (r *RecordSpans) Shutdown(ctx context.Context) error {
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *RecordSpans) run() {
	defer close(r.done)
	tick := time.NewTicker(r.delay)
	defer tick.Stop()
	var reported int64
	for {
		var ack chan struct{}
		select {
		case <-r.stop:
			r.mu.Lock()
			r.maxQueue = 0 // spans ended from now on are dropped (and counted)
			r.mu.Unlock()
			r.exportQueued()
			return
		case ack = <-r.flush:
		case <-r.kick:
		case <-tick.C:
		}
		r.exportQueued()
		if ack != nil {
			close(ack)
		}
		if d := r.dropped.Load(); d != reported {
			otel.Handle(fmt.Errorf("%d per-record spans dropped: the span export queue (%d) was full", d-reported, r.maxQueue))
			reported = d
		}
	}
}

// exportQueued takes the queue and exports it in batches. Spans ended meanwhile go to
// the other buffer; a full batch there kicks the loop again.
func (r *RecordSpans) exportQueued() {
	r.mu.Lock()
	all := r.queue
	r.queue = r.spare[:0]
	r.mu.Unlock()
	for batch := all; len(batch) > 0; {
		n := min(len(batch), r.maxBatch)
		r.export(batch[:n])
		batch = batch[n:]
	}
	clear(all) // the strings the spans held may go
	r.spare = all[:0]
	if cap(r.spare) > 4*r.maxBatch { // a burst grew it: let it go
		r.spare = make([]RecordSpan, 0, r.maxBatch)
	}
}

// export encodes spans and uploads them. The spans are encoded straight into OTLP wire
// format (protowire) and handed to the client as the raw content of the ScopeSpans
// message — its "unknown" fields, which protobuf marshals verbatim — so no message per
// span, attribute or value is built, sized and walked by reflection.
func (r *RecordSpans) export(spans []RecordSpan) {
	if len(r.topics) > 4096 {
		clear(r.topics)
	}
	raw := r.raw[:0]
	for i := range spans {
		r.span = appendSpan(r.span[:0], &spans[i], r.topic(&spans[i]))
		raw = protowire.AppendTag(raw, fieldScopeSpansSpans, protowire.BytesType)
		raw = protowire.AppendBytes(raw, r.span)
	}
	r.raw = raw
	r.ss.ProtoReflect().SetUnknown(raw)
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	err := r.client.UploadTraces(ctx, r.req)
	cancel()
	r.ss.ProtoReflect().SetUnknown(nil)
	if cap(r.raw) > 64<<20 { // a batch of huge error messages: let it go
		r.raw = nil
	}
	if err != nil {
		otel.Handle(fmt.Errorf("exporting %d per-record spans: %w", len(spans), err))
	} else {
		r.exported.Add(int64(len(spans)))
	}
}

// topic is what every span of one kind to one topic (and subscription) shares, encoded
// once: the name and the constant attributes.
func (r *RecordSpans) topic(s *RecordSpan) *topicWire {
	k := topicKey{topic: s.topic}
	if s.link != nil {
		k.group, k.process = s.link.group, true
	}
	t := r.topics[k]
	if t == nil {
		name := strings.ToValidUTF8(k.topic, "\uFFFD")
		t = &topicWire{name: "publish " + name, kind: tracepb.Span_SPAN_KIND_PRODUCER}
		t.attrs = appendStringAttr(t.attrs, string(AttrSystemPulsar.Key), AttrSystemPulsar.Value.AsString())
		if k.process {
			t.name, t.kind = "process "+name, tracepb.Span_SPAN_KIND_CONSUMER
			t.attrs = appendStringAttr(t.attrs, string(AttrOpProcess.Key), AttrOpProcess.Value.AsString())
			t.attrs = appendStringAttr(t.attrs, string(semconv.MessagingOperationNameKey), "process")
			t.attrs = appendStringAttr(t.attrs, string(semconv.MessagingConsumerGroupNameKey), strings.ToValidUTF8(k.group, "\uFFFD"))
		} else {
			t.attrs = appendStringAttr(t.attrs, string(AttrOpPublish.Key), AttrOpPublish.Value.AsString())
		}
		t.attrs = appendStringAttr(t.attrs, string(semconv.MessagingDestinationNameKey), name)
		r.topics[k] = t
	}
	return t
}

type topicKey struct {
	topic, group string
	process      bool
}

type topicWire struct {
	name  string
	kind  tracepb.Span_SpanKind
	attrs []byte // encoded Span.attributes fields
}

// Field numbers of the OTLP trace messages (opentelemetry/proto/trace/v1/trace.proto and
// common/v1/common.proto).
const (
	fieldScopeSpansSpans = 2

	fieldSpanTraceID      = 1
	fieldSpanSpanID       = 2
	fieldSpanTraceState   = 3
	fieldSpanParentSpanID = 4
	fieldSpanName         = 5
	fieldSpanKind         = 6
	fieldSpanStart        = 7
	fieldSpanEnd          = 8
	fieldSpanAttributes   = 9
	fieldSpanEvents       = 11
	fieldSpanLinks        = 13
	fieldSpanStatus       = 15
	fieldSpanFlags        = 16

	fieldEventTime       = 1
	fieldEventName       = 2
	fieldEventAttributes = 3

	fieldLinkTraceID = 1
	fieldLinkSpanID  = 2
	fieldLinkFlags   = 6

	fieldStatusMessage = 2
	fieldStatusCode    = 3

	fieldKeyValueKey   = 1
	fieldKeyValueValue = 2
	fieldAnyString     = 1
	fieldAnyInt        = 3
)

// appendSpan encodes one span as an OTLP Span message (without its own tag and length).
func appendSpan(b []byte, s *RecordSpan, t *topicWire) []byte {
	b = protowire.AppendTag(b, fieldSpanTraceID, protowire.BytesType)
	p := s.parent
	b = protowire.AppendBytes(b, p.traceID[:])
	b = protowire.AppendTag(b, fieldSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, s.spanID[:])
	if p.traceState != "" {
		b = protowire.AppendTag(b, fieldSpanTraceState, protowire.BytesType)
		b = protowire.AppendString(b, p.traceState)
	}
	b = protowire.AppendTag(b, fieldSpanParentSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, p.spanID[:])
	b = protowire.AppendTag(b, fieldSpanName, protowire.BytesType)
	b = protowire.AppendString(b, t.name)
	b = protowire.AppendTag(b, fieldSpanKind, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.kind))
	b = protowire.AppendTag(b, fieldSpanStart, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.start))
	b = protowire.AppendTag(b, fieldSpanEnd, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.end))
	b = append(b, t.attrs...)
	b = appendIntAttr(b, string(semconv.MessagingMessageBodySizeKey), s.size)
	if s.failure == nil {
		b = appendStringAttr(b, string(semconv.MessagingMessageIDKey), s.messageID)
	} else {
		// As the SDK's RecordError and SetStatus(Error) would: an exception event and an
		// error status with the message.
		msg := strings.ToValidUTF8(s.failure.message, "\uFFFD")
		var ev []byte
		ev = protowire.AppendTag(ev, fieldEventTime, protowire.Fixed64Type)
		ev = protowire.AppendFixed64(ev, uint64(s.end))
		ev = protowire.AppendTag(ev, fieldEventName, protowire.BytesType)
		ev = protowire.AppendString(ev, semconv.ExceptionEventName)
		ev = appendKeyValue(ev, fieldEventAttributes, string(semconv.ExceptionTypeKey), s.failure.typ)
		ev = appendKeyValue(ev, fieldEventAttributes, string(semconv.ExceptionMessageKey), msg)
		b = protowire.AppendTag(b, fieldSpanEvents, protowire.BytesType)
		b = protowire.AppendBytes(b, ev)
		var st []byte
		st = protowire.AppendTag(st, fieldStatusMessage, protowire.BytesType)
		st = protowire.AppendString(st, msg)
		st = protowire.AppendTag(st, fieldStatusCode, protowire.VarintType)
		st = protowire.AppendVarint(st, uint64(tracepb.Status_STATUS_CODE_ERROR))
		b = protowire.AppendTag(b, fieldSpanStatus, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
	}
	if l := s.link; l != nil {
		var arr [48]byte
		lb := arr[:0]
		lb = protowire.AppendTag(lb, fieldLinkTraceID, protowire.BytesType)
		lb = protowire.AppendBytes(lb, l.traceID[:])
		lb = protowire.AppendTag(lb, fieldLinkSpanID, protowire.BytesType)
		lb = protowire.AppendBytes(lb, l.spanID[:])
		lb = protowire.AppendTag(lb, fieldLinkFlags, protowire.Fixed32Type)
		lb = protowire.AppendFixed32(lb, l.flags)
		b = protowire.AppendTag(b, fieldSpanLinks, protowire.BytesType)
		b = protowire.AppendBytes(b, lb)
	}
	// Flags: sampled, and whether the parent is remote is known.
	flags := uint32(trace.FlagsSampled) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if p.remote {
		flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	b = protowire.AppendTag(b, fieldSpanFlags, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

// appendStringAttr appends a string attribute as a Span.attributes field.
func appendStringAttr(b []byte, key, value string) []byte {
	return appendKeyValue(b, fieldSpanAttributes, key, value)
}

// appendKeyValue appends a KeyValue with a string value as field num.
func appendKeyValue(b []byte, num protowire.Number, key, value string) []byte {
	b = appendKeyValueHead(b, num, key, protowire.SizeTag(fieldAnyString)+protowire.SizeBytes(len(value)))
	b = protowire.AppendTag(b, fieldAnyString, protowire.BytesType)
	return protowire.AppendString(b, value)
}

// appendIntAttr appends an int attribute as a Span.attributes field.
func appendIntAttr(b []byte, key string, value int64) []byte {
	b = appendKeyValueHead(b, fieldSpanAttributes, key, protowire.SizeTag(fieldAnyInt)+protowire.SizeVarint(uint64(value)))
	b = protowire.AppendTag(b, fieldAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(value))
}

// appendKeyValueHead appends a KeyValue as field num up to its AnyValue's contents, which
// are valueSize bytes long and follow.
func appendKeyValueHead(b []byte, num protowire.Number, key string, valueSize int) []byte {
	kv := protowire.SizeTag(fieldKeyValueKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fieldKeyValueValue) + protowire.SizeBytes(valueSize)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, fieldKeyValueKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fieldKeyValueValue, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(valueSize))
}

const instrumentationName = "github.com/recordio-bridge/bridge"

// attrsPB converts resource attributes to OTLP.
func attrsPB(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: valuePB(kv.Value)})
	}
	return out
}

func valuePB(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE:
		var vals []*commonpb.AnyValue
		switch v.Type() {
		case attribute.BOOLSLICE:
			for _, x := range v.AsBoolSlice() {
				vals = append(vals, valuePB(attribute.BoolValue(x)))
			}
		case attribute.INT64SLICE:
			for _, x := range v.AsInt64Slice() {
				vals = append(vals, valuePB(attribute.Int64Value(x)))
			}
		case attribute.FLOAT64SLICE:
			for _, x := range v.AsFloat64Slice() {
				vals = append(vals, valuePB(attribute.Float64Value(x)))
			}
		default:
			for _, x := range v.AsStringSlice() {
				vals = append(vals, valuePB(attribute.StringValue(x)))
			}
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
}
