// Package directspan has one job: it makes a finished span as a value of its own type
// implementing sdktrace.ReadOnlySpan and hands it straight to the span processors a
// TracerProvider was built with, with the SDK's span limits applied exactly as the SDK
// applies them — the span the SDK's tracer would have handed them for the same Start,
// SetAttributes, AddLink, RecordError, SetStatus and End calls, without Tracer.Start and
// Span.End (no recording span, lock, snapshot or context per span).
//
// Its contract is a differential test against the SDK (directspan_test.go and
// telemetry's TestDirectSpansEqualSDKSpans): the same spans made both ways, captured by
// the same processors, are equal in every field a ReadOnlySpan has.
//
// What a Maker does not do, because the bridge's record spans do not need it: span
// processors' OnStart is not called (no ReadWriteSpan exists), and attribute values are
// scalars and strings (bool, int64, float64, string and their slices, byte slices): a
// map or nested slice value, which the SDK normalises to a depth, is not supported.
package directspan

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Maker hands spans to a provider's processors. It is safe for concurrent use.
type Maker struct {
	procs  []sdktrace.SpanProcessor
	limits sdktrace.SpanLimits
	scope  instrumentation.Scope
	res    *resource.Resource
	// stopped: the provider is shut down, its processors are no longer handed spans.
	stopped atomic.Bool
	// pool holds spans for reuse when every processor keeps nothing of a span after its
	// OnEnd (each implements KeepsNoSpan); nil otherwise.
	pool *sync.Pool
}

// KeepsNoSpan is implemented by a span processor whose OnEnd keeps nothing of the span
// it is handed once it returns (it counts it, or encodes it at once). When every
// processor of a Maker implements it, the Maker reuses its spans: a span is handed to
// the processors, then made again for the next End. A processor that keeps spans (the
// SDK's BatchSpanProcessor keeps them until their export) must not implement it.
type KeepsNoSpan interface {
	sdktrace.SpanProcessor
	EndKeepsNoSpan()
}

// Stop makes End hand spans to no processor from now on, as the SDK's tracer hands
// them to none once its provider's Shutdown has returned. Call it then.
func (m *Maker) Stop() { m.stopped.Store(true) }

// New makes a Maker for the tracer named scopeName (version scopeVersion) of a provider
// built with resource res (sdktrace.WithResource), span limits limits
// (sdktrace.WithRawSpanLimits) and the processors procs, in the order the provider
// has them. The instrumentation scope and resource its spans carry are read from a span
// a provider built the same way makes (so they are the SDK tracer's whatever the SDK
// adds, such as the OTEL_RESOURCE_ATTRIBUTES it merges into res); that span goes to no
// processor of procs.
func New(procs []sdktrace.SpanProcessor, limits sdktrace.SpanLimits, res *resource.Resource, scopeName, scopeVersion string) (*Maker, error) {
	if limits.AttributeValueDepthLimit < 0 {
		// The SDK then deduplicates event and link attributes by key, which this
		// package does not do.
		return nil, fmt.Errorf("span limits: AttributeValueDepthLimit %d: directspan wants a depth limit (sdktrace.NewSpanLimits gives %d)",
			limits.AttributeValueDepthLimit, sdktrace.DefaultAttributeValueDepthLimit)
	}
	probe := &capture{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(probe))
	_, s := tp.Tracer(scopeName, trace.WithInstrumentationVersion(scopeVersion)).Start(context.Background(), "probe")
	s.End()
	_ = tp.Shutdown(context.Background())
	if probe.span == nil {
		return nil, errors.New("directspan: the probe span did not reach its processor")
	}
	m := &Maker{procs: append([]sdktrace.SpanProcessor(nil), procs...), limits: limits, scope: probe.span.InstrumentationScope(),
		res: probe.span.Resource()}
	reuse := true
	for _, p := range procs {
		if _, ok := p.(KeepsNoSpan); !ok {
			reuse = false
		}
	}
	if reuse {
		m.pool = &sync.Pool{New: func() any { return new(span) }}
	}
	return m, nil
}

// put returns sp to the pool once every OnEnd has returned (none keeps it: KeepsNoSpan),
// cleared, so the pool holds nothing of a caller's.
func (m *Maker) put(sp *span) {
	*sp = span{}
	m.pool.Put(sp)
}

// Reuses reports whether the Maker reuses its spans (every processor is a KeepsNoSpan).
func (m *Maker) Reuses() bool { return m.pool != nil }

// Span is a finished span as the caller describes it: what the SDK's tracer would be
// told by Start (name, kind, start time, parent, and the ids and decision the span gets
// in SpanContext), RecordError(Err, WithTimestamp(End)) and SetStatus(codes.Error,
// Err.Error()) when Err is not nil, and End(WithTimestamp(End)). Its attributes and
// links are End's own arguments (so a caller's arrays for them stay on its stack).
type Span struct {
	Name        string
	SpanContext trace.SpanContext // the span's ids, flags and tracestate
	Parent      trace.SpanContext // invalid for a root
	Kind        trace.SpanKind
	Start, End  time.Time
	Err         error
}

// End makes s's span, as if given one SetAttributes(attrs...) and AddLink for each of
// links after its start, and hands it to each processor's OnEnd, in order (to none after
// Stop). Nothing of s, attrs and links is kept but their strings and values: End copies
// what it needs.
func (m *Maker) End(s *Span, attrs []attribute.KeyValue, links []trace.Link) {
	if m.stopped.Load() {
		return
	}
	sp := m.begin(s)
	sp.setAttributes(attrs)
	m.end(sp, s, links)
}

// Shape is the attributes a kind of span is given, in this order: constant ones (the
// same values on every span) followed by keys whose values each span gives
// (EndShaped). Made once (Maker.Shape), it lets End skip for each span what the SDK does
// to attributes that it can decide once: the constants' values are cut to the span
// limits once, and when every key is defined and distinct and the count limit lets them
// all through, a span's attributes are copied in without the SDK's deduplication and
// count.
type Shape struct {
	consts []attribute.KeyValue // as given (the general path normalises them itself)
	normed []attribute.KeyValue // consts cut to the limits
	keys   []attribute.Key
	// fast: every key defined and distinct, and the count limit lets consts and keys all
	// through: a span's attributes are the normed consts and its values, each cut to
	// the length limit, exactly what SetAttributes makes of them.
	fast bool
}

// Shape makes the Shape of spans whose attributes are consts followed by keys, for
// EndShaped.
func (m *Maker) Shape(consts []attribute.KeyValue, keys ...attribute.Key) *Shape {
	sh := &Shape{consts: append([]attribute.KeyValue(nil), consts...), keys: append([]attribute.Key(nil), keys...)}
	probe := span{m: m}
	sh.normed = make([]attribute.KeyValue, len(consts))
	for i, a := range consts {
		sh.normed[i] = probe.norm(a)
	}
	n := len(consts) + len(keys)
	limit := m.limits.AttributeCountLimit
	sh.fast = limit < 0 || (limit > 0 && n <= limit)
	seen := make(map[attribute.Key]bool, n)
	for _, a := range consts {
		sh.fast = sh.fast && a.Key.Defined() && !seen[a.Key]
		seen[a.Key] = true
	}
	for _, k := range keys {
		sh.fast = sh.fast && k.Defined() && !seen[k]
		seen[k] = true
	}
	return sh
}

// EndShaped is End(s, attrs, links) with attrs sh's constants followed by the first
// len(vals) of sh's keys, vals[i] the value of key i (len(vals) at most len(keys)).
func (m *Maker) EndShaped(s *Span, sh *Shape, vals []attribute.Value, links []trace.Link) {
	if m.stopped.Load() {
		return
	}
	if len(vals) > len(sh.keys) {
		panic(fmt.Sprintf("directspan: EndShaped: %d values for a shape of %d keys", len(vals), len(sh.keys)))
	}
	sp := m.begin(s)
	if sh.fast {
		n := len(sh.normed) + len(vals)
		if n <= len(sp.attrBuf) {
			sp.attrs = sp.attrBuf[:n]
		} else {
			sp.attrs = make([]attribute.KeyValue, n)
		}
		copy(sp.attrs, sh.normed)
		limit := m.limits.AttributeValueLengthLimit
		for i, v := range vals {
			a := &sp.attrs[len(sh.normed)+i]
			a.Key = sh.keys[i]
			if limit >= 0 && (v.Type() != attribute.STRING || len(v.AsString()) > limit) {
				v = sp.norm(attribute.KeyValue{Value: v}).Value
			}
			a.Value = v
		}
	} else {
		var buf [8]attribute.KeyValue
		attrs := buf[:0]
		if n := len(sh.consts) + len(vals); n > len(buf) {
			attrs = make([]attribute.KeyValue, 0, n)
		}
		attrs = append(attrs, sh.consts...)
		for i, v := range vals {
			attrs = append(attrs, attribute.KeyValue{Key: sh.keys[i], Value: v})
		}
		sp.setAttributes(attrs)
	}
	m.end(sp, s, links)
}

// begin is a span for s: reused (cleared when put back) or new.
func (m *Maker) begin(s *Span) *span {
	var sp *span
	if m.pool != nil {
		sp = m.pool.Get().(*span) // cleared when put back
		sp.m, sp.name, sp.sc, sp.kind, sp.start, sp.end = m, s.Name, s.SpanContext, s.Kind, s.Start, s.End
	} else {
		sp = &span{m: m, name: s.Name, sc: s.SpanContext, kind: s.Kind, start: s.Start, end: s.End}
	}
	if s.Parent.IsValid() {
		sp.parent = s.Parent
	}
	if s.Kind == trace.SpanKindUnspecified {
		sp.kind = trace.SpanKindInternal // as the SDK's Start
	}
	return sp
}

// end adds links and s's error to sp, hands it to the processors and, when spans are
// reused, puts it back.
func (m *Maker) end(sp *span, s *Span, links []trace.Link) {
	for i := range links {
		sp.addLink(&links[i])
	}
	if s.Err != nil {
		msg := s.Err.Error()
		sp.addEvent(sdktrace.Event{Name: semconv.ExceptionEventName, Time: s.End},
			semconv.ExceptionType(typeStr(s.Err)), semconv.ExceptionMessage(msg))
		sp.status = sdktrace.Status{Code: codes.Error, Description: msg}
	}
	sp.finish()
	for _, p := range m.procs {
		p.OnEnd(sp)
	}
	if m.pool != nil {
		m.put(sp)
	}
}

// span is one finished span: a single allocation for the spans the bridge makes (up to
// len(attrBuf) attributes and one link), one more for a failed one's exception event. It
// is reused only when every processor is a KeepsNoSpan; otherwise a processor may keep
// it until its export, and nothing says when that is done.
type span struct {
	sdktrace.ReadOnlySpan // nil: only satisfies the interface's unexported method

	m                                        *Maker
	name                                     string
	sc, parent                               trace.SpanContext
	kind                                     trace.SpanKind
	start, end                               time.Time
	attrs                                    []attribute.KeyValue
	links                                    []sdktrace.Link
	events                                   []sdktrace.Event
	status                                   sdktrace.Status
	droppedAttrs, droppedLinks, droppedEvent int
	attrsDirty                               bool // attributes may hold a key twice (dedupe at finish)

	attrBuf [7]attribute.KeyValue
	linkBuf [1]sdktrace.Link
}

// eventBuf holds a span's one event and its attributes (a failed record's exception).
type eventBuf struct {
	events [1]sdktrace.Event
	attrs  [2]attribute.KeyValue
}

// setAttributes is the SDK's recordingSpan.SetAttributes on a span with no attributes yet.
func (s *span) setAttributes(attrs []attribute.KeyValue) {
	if len(attrs) == 0 {
		return
	}
	limit := s.m.limits.AttributeCountLimit
	if limit == 0 {
		s.droppedAttrs += len(attrs)
		return
	}
	n := len(attrs)
	if limit > 0 {
		n = min(n, limit)
	}
	if n <= len(s.attrBuf) {
		s.attrs = s.attrBuf[:0]
	} else {
		s.attrs = make([]attribute.KeyValue, 0, n)
	}
	if limit > 0 && len(attrs) > limit {
		// addOverCapAttrs: deduplicated while added, updates applied even at the limit.
		for _, a := range attrs {
			if !a.Valid() {
				s.droppedAttrs++
				continue
			}
			if i := indexOf(s.attrs, a.Key); i >= 0 {
				s.attrs[i] = s.norm(a)
				continue
			}
			if len(s.attrs) >= limit {
				s.droppedAttrs++
			} else {
				s.attrs = append(s.attrs, s.norm(a))
			}
		}
		return
	}
	for _, a := range attrs {
		if !a.Valid() {
			s.droppedAttrs++
			continue
		}
		s.attrs = append(s.attrs, s.norm(a))
		s.attrsDirty = true
	}
}

func indexOf(attrs []attribute.KeyValue, k attribute.Key) int {
	for i := range attrs {
		if attrs[i].Key == k {
			return i
		}
	}
	return -1
}

// finish is the SDK's snapshot: attributes deduplicated (each key once, where it first
// came, with its last value).
//
// Like the snapshot, it leaves no empty non-nil slice: none kept is nil.
func (s *span) finish() {
	if len(s.links) == 0 {
		s.links = nil
	}
	if len(s.events) == 0 {
		s.events = nil
	}
	if len(s.attrs) == 0 {
		s.attrs = nil
	}
	if !s.attrsDirty {
		return
	}
	unique := s.attrs[:0]
	for _, a := range s.attrs {
		if i := indexOf(unique, a.Key); i >= 0 {
			unique[i] = a
		} else {
			unique = append(unique, a)
		}
	}
	clear(s.attrs[len(unique):])
	s.attrs = unique
	s.attrsDirty = false
}

// addLink is the SDK's recordingSpan.AddLink (link attributes are not truncated by
// length there either).
func (s *span) addLink(link *trace.Link) {
	if len(link.Attributes) == 0 && s.links == nil && s.m.limits.LinkCountLimit != 0 && link.SpanContext.IsValid() {
		// A span's first link, without attributes (a record's, to its segment): kept
		// whole, nothing to count.
		s.linkBuf[0] = sdktrace.Link{SpanContext: link.SpanContext}
		s.links = s.linkBuf[:1]
		return
	}
	if !link.SpanContext.IsValid() && len(link.Attributes) == 0 && link.SpanContext.TraceState().Len() == 0 {
		return
	}
	l := sdktrace.Link{SpanContext: link.SpanContext}
	if len(link.Attributes) > 0 {
		l.Attributes = append([]attribute.KeyValue(nil), link.Attributes...)
	}
	switch limit := s.m.limits.AttributePerLinkCountLimit; {
	case limit == 0:
		l.DroppedAttributeCount = len(l.Attributes)
		l.Attributes = nil
	case limit > 0 && len(l.Attributes) > limit:
		l.DroppedAttributeCount = len(l.Attributes) - limit
		l.Attributes = l.Attributes[:limit]
	}
	if s.links == nil {
		s.links = s.linkBuf[:0]
	}
	s.links = addEvicting(s.links, l, s.m.limits.LinkCountLimit, &s.droppedLinks)
}

// addEvent is the SDK's recordingSpan.addEvent (event attributes are not truncated by
// length there).
func (s *span) addEvent(e sdktrace.Event, attrs ...attribute.KeyValue) {
	var eb *eventBuf
	if s.events == nil {
		eb = &eventBuf{}
		s.events = eb.events[:0]
	}
	if eb != nil && len(attrs) <= len(eb.attrs) {
		e.Attributes = append(eb.attrs[:0], attrs...)
	} else {
		e.Attributes = append([]attribute.KeyValue(nil), attrs...)
	}
	switch limit := s.m.limits.AttributePerEventCountLimit; {
	case limit == 0:
		e.DroppedAttributeCount = len(e.Attributes)
		e.Attributes = nil
	case limit > 0 && len(e.Attributes) > limit:
		e.DroppedAttributeCount = len(e.Attributes) - limit
		e.Attributes = e.Attributes[:limit]
	}
	s.events = addEvicting(s.events, e, s.m.limits.EventCountLimit, &s.droppedEvent)
}

// addEvicting is the SDK's evictedQueue.add: at capacity the oldest goes; capacity 0
// keeps nothing; a negative one has no limit.
func addEvicting[T any](q []T, v T, capacity int, dropped *int) []T {
	if capacity == 0 {
		*dropped++
		return q
	}
	if capacity > 0 && len(q) == capacity {
		copy(q[:capacity-1], q[1:])
		q = q[:capacity-1]
		*dropped++
	}
	return append(q, v)
}

// norm is the SDK's normAttr for the values this package supports: strings truncated to
// AttributeValueLengthLimit characters, byte slices to as many bytes, each string of a
// string slice as a string.
func (s *span) norm(a attribute.KeyValue) attribute.KeyValue {
	limit := s.m.limits.AttributeValueLengthLimit
	if limit < 0 {
		return a
	}
	switch a.Value.Type() {
	case attribute.STRING:
		if v := a.Value.AsString(); len(v) > limit {
			a.Value = attribute.StringValue(truncate(limit, v))
		}
	case attribute.BYTESLICE:
		if v := a.Value.AsString(); len(v) > limit {
			a.Value = attribute.ByteSliceValue([]byte(v[:limit]))
		}
	case attribute.STRINGSLICE:
		vs := a.Value.AsStringSlice()
		changed := false
		for i, v := range vs {
			if t := truncate(limit, v); t != v {
				vs[i], changed = t, true
			}
		}
		if changed {
			a.Value = attribute.StringSliceValue(vs)
		}
	}
	return a
}

// truncate is the SDK's (sdk/internal/attrnorm): s cut to limit characters, invalid
// UTF-8 bytes dropped once s is longer than limit bytes.
func truncate(limit int, s string) string {
	if limit < 0 || len(s) <= limit {
		return s
	}
	var b strings.Builder
	count := 0
	for i, c := range s {
		if c != utf8.RuneError {
			count++
			if count > limit {
				return s[:i]
			}
			continue
		}
		if limit == 0 {
			return ""
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		if size == 1 {
			b.Grow(len(s) - 1)
			_, _ = b.WriteString(s[:i])
			s = s[i:]
			break
		}
		count++
		if count > limit {
			return s[:i]
		}
	}
	if b.Cap() == 0 {
		return s
	}
	for i := 0; i < len(s) && count < limit; {
		c := s[i]
		if c < utf8.RuneSelf {
			_ = b.WriteByte(c)
			i++
			count++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		if size == 1 {
			i++
			continue
		}
		_, _ = b.WriteString(s[i : i+size])
		i += size
		count++
	}
	return b.String()
}

// typeStr is the SDK's name of an error's type in an exception event.
func typeStr(i any) string {
	t := reflect.TypeOf(i)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

// The ReadOnlySpan methods, as the SDK's snapshot answers them.

func (s *span) Name() string                                { return s.name }
func (s *span) SpanContext() trace.SpanContext              { return s.sc }
func (s *span) Parent() trace.SpanContext                   { return s.parent }
func (s *span) SpanKind() trace.SpanKind                    { return s.kind }
func (s *span) StartTime() time.Time                        { return s.start }
func (s *span) EndTime() time.Time                          { return s.end }
func (s *span) Attributes() []attribute.KeyValue            { return s.attrs }
func (s *span) Links() []sdktrace.Link                      { return s.links }
func (s *span) Events() []sdktrace.Event                    { return s.events }
func (s *span) Status() sdktrace.Status                     { return s.status }
func (s *span) Resource() *resource.Resource                { return s.m.res }
func (s *span) DroppedAttributes() int                      { return s.droppedAttrs }
func (s *span) ChildSpanCount() int                         { return 0 } // a record's span starts none
func (s *span) InstrumentationScope() instrumentation.Scope { return s.m.scope }

// InstrumentationLibrary is the scope under its old name, as the SDK's snapshot gives it.
//
//nolint:staticcheck // the interface still has it
func (s *span) InstrumentationLibrary() instrumentation.Library {
	return instrumentation.Library(s.m.scope)
}

// DroppedLinks and DroppedEvents are counted only when some link (event) was kept: the
// SDK's snapshot copies the count with the queue, and an empty queue (a limit of 0)
// leaves it 0.
func (s *span) DroppedLinks() int {
	if len(s.links) == 0 {
		return 0
	}
	return s.droppedLinks
}

func (s *span) DroppedEvents() int {
	if len(s.events) == 0 {
		return 0
	}
	return s.droppedEvent
}

// capture keeps the one span a probe provider ends.
type capture struct{ span sdktrace.ReadOnlySpan }

func (c *capture) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *capture) OnEnd(s sdktrace.ReadOnlySpan)                   { c.span = s }
func (c *capture) Shutdown(context.Context) error                  { return nil }
func (c *capture) ForceFlush(context.Context) error                { return nil }
