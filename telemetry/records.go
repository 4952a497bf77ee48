package telemetry

import (
	"context"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// RecordSpan is one record's span: "publish <topic>" on ingress, "process <topic>" on
// egress. Each record is sampled on its own: the configured sampler is asked about the
// record's own trace id (a new root) or its parent (a context the client or the message
// supplied), so at 1 % one record in a hundred is traced, whatever the streams. A record
// whose span was not sampled still has a context (flag not sampled), which its message
// carries only as Propagates says. An unsampled record costs the sampler's decision and
// its ids. A sampled record's span is an ordinary SDK span, made when the record ends
// (EndRecord): started with the ids, the decision and the start time the record already
// had, its attributes, link and outcome set, and ended, through the SDK's tracer, span
// limits, processors and exporter. Making it whole at the end, rather than starting it
// with the record, keeps no SDK span alive while the record waits for the broker and
// sets the attributes once.
//
// A record that fails is always traced: EndRecord makes its span the same way whatever
// the sampler said.
//
// The zero RecordSpan (tracing off) is no span.
//
// It is written by the goroutine that reads a record and read by the one that settles
// it, most often on another core, so every cache line of it crosses between cores once
// each way per record: it holds the contexts it continues and links to as their parts
// (ids, flags, remote), not as two whole SpanContexts (64 bytes each, most of it a
// tracestate neither has), 160 bytes in all rather than 256.
type RecordSpan struct {
	// The record's context, sampled or not: its ids (zero with tracing off), flags
	// and tracestate, kept apart (SpanContext makes it) so starting a record writes
	// no more than it must.
	tid   trace.TraceID
	sid   trace.SpanID
	psid  trace.SpanID  // the span id of the context the record continues (zero: none); its trace is tid
	ltid  trace.TraceID // the stream's segment span's context (zero: none)
	lsid  trace.SpanID
	state trace.TraceState
	// pstate is the parent's tracestate when a sampler gave the record another one (nil:
	// the record's own, as every sampler OTEL_TRACES_SAMPLER names gives it).
	pstate *trace.TraceState
	start  time.Time
	size   int64
	topic  string
	group  string // process spans: the subscription
	flags  trace.TraceFlags
	// The flags of the parent and of the link, and whether each is remote.
	pflags, lflags   trace.TraceFlags
	premote, lremote bool
	process          bool
	record           bool // the sampler said record: EndRecord makes the span
	// propagate: an unsampled record's context goes into its message too
	// (tracing.propagateUnsampled).
	propagate bool
}

// parent is the context the record continues (invalid: none).
func (r *RecordSpan) parent() trace.SpanContext {
	if !r.psid.IsValid() {
		return trace.SpanContext{}
	}
	ts := r.state
	if r.pstate != nil {
		ts = *r.pstate
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.tid, SpanID: r.psid, TraceFlags: r.pflags, TraceState: ts,
		Remote: r.premote})
}

// link is the stream's segment span's context (invalid: none).
func (r *RecordSpan) link() trace.SpanContext {
	if !r.lsid.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.ltid, SpanID: r.lsid, TraceFlags: r.lflags, Remote: r.lremote})
}

// setLink keeps link's parts (a segment's context has no tracestate; a link's is not
// exported).
func (r *RecordSpan) setLink(link trace.SpanContext) {
	if !link.IsValid() {
		r.ltid, r.lsid, r.lflags, r.lremote = trace.TraceID{}, trace.SpanID{}, 0, false
		return
	}
	r.ltid, r.lsid, r.lflags, r.lremote = link.TraceID(), link.SpanID(), link.TraceFlags(), link.IsRemote()
}

// SpanContext is the record's context (invalid with tracing off).
func (r *RecordSpan) SpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.tid, SpanID: r.sid, TraceFlags: r.flags, TraceState: r.state})
}

// Recording reports whether the record's span was sampled.
func (r *RecordSpan) Recording() bool { return r.record }

// Propagates reports whether the record's context goes into its message, whose
// properties (nil for none) are props: a sampled record's always, so its consumers
// continue the trace. An unsampled record's only when the message already carries a
// traceparent (the client's context for the record: it is replaced by the record's own,
// which continues it and carries its decision) or tracing.propagateUnsampled is
// on. Otherwise an unsampled record's message carries no context: no 55-byte property in
// every message for the broker to store and every consumer to decode, at the price that
// a consumer cannot tell "not sampled" from "never traced" (docs/tracing.md).
// False with tracing off.
func (r *RecordSpan) Propagates(props map[string]string) bool {
	if r.flags.IsSampled() {
		return true
	}
	if !r.sid.IsValid() {
		return false
	}
	if r.propagate {
		return true
	}
	_, ok := props["traceparent"]
	return ok
}

// Inject writes the record's context into a message's properties as traceparent (and
// tracestate, when it has one), so its consumers continue the trace — and honour the
// decision when it was not sampled. It does nothing with tracing off. Callers inject
// only when Propagates says so.
func (r *RecordSpan) Inject(props map[string]string) {
	if !r.sid.IsValid() {
		return
	}
	var b [55]byte
	r.traceparent(&b)
	props["traceparent"] = string(b[:])
	if ts := r.state; ts.Len() > 0 {
		props["tracestate"] = ts.String()
	} else if len(props) > 1 {
		delete(props, "tracestate") // a reused map may hold an earlier record's
	}
}

// AppendTraceparent appends the record's traceparent to dst, for a message that carries
// it as a property given as bytes rather than in a map: what Inject writes, when props
// (the message's other properties) hold no tracestate and the record's context has
// none. ok is false otherwise, and with tracing off: Inject is then the way. Callers
// append only when Propagates says so.
func (r *RecordSpan) AppendTraceparent(dst []byte, props map[string]string) (b []byte, ok bool) {
	if !r.sid.IsValid() || r.state.Len() > 0 {
		return dst, false
	}
	if _, stale := props["tracestate"]; stale {
		return dst, false // Inject removes it
	}
	var tp [55]byte
	r.traceparent(&tp)
	return append(dst, tp[:]...), true
}

// traceparent writes the record's context as a W3C traceparent (version 00) into b.
func (r *RecordSpan) traceparent(b *[55]byte) {
	b[0], b[1], b[2] = '0', '0', '-'
	for i, c := range r.tid {
		*(*[2]byte)(b[3+2*i:]) = hexPairs[c] // a pair a byte: hex.Encode's nibble loop cost ~4x this
	}
	b[35] = '-'
	for i, c := range r.sid {
		*(*[2]byte)(b[36+2*i:]) = hexPairs[c]
	}
	// The flags a W3C traceparent of version 00 carries: sampled and random.
	b[52], b[53], b[54] = '-', '0', '0'+byte(r.flags&(trace.FlagsSampled|trace.FlagsRandom))
}

// hexPairs[c] is c in lower-case hex.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = [2]byte{digits[i>>4], digits[i&15]}
	}
	return t
}()

// StartPublish begins r, the publish span of a record sent to topic, at start. parent is
// a context the client supplied for this record (invalid for none: the span is then a
// root of its own trace); link is the stream's segment span.
func (t *Tracing) StartPublish(r *RecordSpan, parent, link trace.SpanContext, topic string, size int64, start time.Time) {
	if !t.Enabled {
		return
	}
	// Field by field: every field is set (a reused RecordSpan keeps nothing), with no
	// temporary copy of the struct.
	r.start, r.size, r.topic, r.group, r.process = start, size, topic, "", false
	r.setLink(link)
	t.startRecord(r, parent)
}

// StartProcess begins the process span of a message delivered to an egress client: a
// child of the context in its properties (a root of its own when it carries none),
// linked to the stream's segment span: r, starting at start.
func (t *Tracing) StartProcess(r *RecordSpan, props map[string]string, link trace.SpanContext, topic, subscription string, size int64,
	start time.Time) {
	if !t.Enabled {
		return
	}
	parent, _ := ParseTraceparent(props)
	r.start, r.size, r.topic, r.group, r.process = start, size, topic, subscription, true
	r.setLink(link)
	t.startRecord(r, parent)
}

func (t *Tracing) startRecord(r *RecordSpan, parent trace.SpanContext) {
	r.propagate = t.propagateUnsampled
	hasParent := parent.IsValid()
	if hasParent {
		r.tid, r.psid, r.pflags, r.premote = parent.TraceID(), parent.SpanID(), parent.TraceFlags(), parent.IsRemote()
		v := rand.Uint64()
		for v == 0 {
			v = rand.Uint64()
		}
		binary.LittleEndian.PutUint64(r.sid[:], v)
	} else {
		r.psid, r.pflags, r.premote = trace.SpanID{}, 0, false
		r.newRootIDs()
	}
	// The record's flags are its parent's (the W3C random flag kept), the sampled flag
	// the decision's, as the SDK's tracer sets a child's.
	var inherited trace.TraceFlags
	if hasParent {
		inherited = parent.TraceFlags() &^ trace.FlagsSampled
	}
	r.flags, r.state, r.pstate = inherited, trace.TraceState{}, nil
	if t.fast != nil {
		// A sampler OTEL_TRACES_SAMPLER names: its decision, computed (sampler.go).
		var sampled bool
		if hasParent {
			sampled, r.state = t.fast.decideChild(parent)
		} else {
			sampled = t.fast.decideRoot(&r.tid)
		}
		if sampled {
			r.flags |= trace.FlagsSampled
		}
		r.record = sampled
		return
	}
	// Another sampler (tests): asked once, as the provider would ask it. EndRecord makes
	// the span it decided on.
	pctx := context.Background()
	if hasParent {
		pctx = trace.ContextWithSpanContext(pctx, parent)
	}
	kind := trace.SpanKindProducer
	if r.process {
		kind = trace.SpanKindConsumer
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: pctx, TraceID: r.tid, Kind: kind})
	if res.Decision == sdktrace.RecordAndSample {
		r.flags |= trace.FlagsSampled
	}
	r.record, r.state = res.Decision != sdktrace.Drop, res.Tracestate
	if hasParent {
		if ps := parent.TraceState(); (ps.Len() > 0 || r.state.Len() > 0) && ps.String() != r.state.String() {
			r.pstate = new(trace.TraceState) // a sampler that changed it: the parent keeps its own
			*r.pstate = ps
		}
	}
}

// The span kinds, made once.
var (
	kindProducer = trace.WithSpanKind(trace.SpanKindProducer)
	kindConsumer = trace.WithSpanKind(trace.SpanKindConsumer)
)

// EndRecord ends r: the record was persisted (or delivered) as messageID, or failed with
// err. Its span, if it was sampled or it failed, is made in the SDK now: started at the
// record's start with its ids and decision (a failed record's always recorded and
// sampled), given its attributes, its link to the segment and its outcome, and ended.
func (t *Tracing) EndRecord(r *RecordSpan, messageID string, err error) {
	t.EndRecordAt(r, messageID, err, nil)
}

// Clock is the time as a goroutine that settles records in runs (a receipt's records
// at once) reads it: once, when the first traced record of a run ends, for up to
// clockRecords records settled with it (traced or not: the bound is the goroutine's
// work since the reading, not the spans), until Stale says the goroutine waited. A
// run's spans end at one reading, a few microseconds early at most, rather than each
// reading the clock (its ~25 ns were a twentieth of a traced record's cost). The zero
// Clock is stale.
type Clock struct {
	now time.Time
	n   int
}

// clockRecords is how many settled records one reading serves.
const clockRecords = 16

// Stale says the goroutine waited (or wrote): the next span reads the clock again.
func (c *Clock) Stale() { c.n = clockRecords }

func (c *Clock) read() time.Time {
	if c.n >= clockRecords || c.now.IsZero() {
		c.now, c.n = time.Now(), 0
	}
	c.n++
	return c.now
}

// EndRecordAt is EndRecord, its span ending at c's reading (nil: the clock's own).
func (t *Tracing) EndRecordAt(r *RecordSpan, messageID string, err error, c *Clock) {
	if !r.record && (err == nil || !t.Enabled || !r.sid.IsValid()) {
		if c != nil {
			c.n++ // settled in the run all the same: the bound is records, not spans
		}
		return
	}
	decision := sdktrace.RecordAndSample
	if r.record && !r.flags.IsSampled() {
		decision = sdktrace.RecordOnly // a sampler's "record, do not sample"
	}
	r.record = false
	var end time.Time
	switch {
	case t.endTime != nil:
		end = t.endTime(r.start)
	case c != nil:
		now := c.read()
		if now.Before(r.start) { // read before this record began
			now = time.Now()
			c.now, c.n = now, 1
		}
		end = r.start.Add(now.Sub(r.start)) // monotonic from the start, as below
	default:
		end = r.start.Add(time.Since(r.start)) // as the SDK's End: monotonic from the start
	}

	name := t.names.of(r.process, r.topic)
	parent := r.parent()
	attrs := r.attributes(make([]attribute.KeyValue, 0, 7), messageID, err)
	ctx := &presetCtx{Context: context.Background(), p: preset{traceID: r.tid, spanID: r.sid, force: true,
		decision: decision, state: r.state}}
	if parent.IsValid() {
		ctx.Context = trace.ContextWithSpanContext(ctx.Context, parent)
	}
	k := kindProducer
	if r.process {
		k = kindConsumer
	}
	_, span := t.Tracer.Start(ctx, name, k, trace.WithTimestamp(r.start))
	span.SetAttributes(attrs...)
	if link := r.link(); link.IsValid() {
		span.AddLink(trace.Link{SpanContext: link})
	}
	if err != nil {
		span.RecordError(err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// spanNames are record spans' names ("publish <topic>", "process <topic>") made once per
// topic rather than once per span (a concatenation, an allocation): a map, replaced
// whole when a topic is added (readers take it without a lock), of at most
// maxSpanNames topics; past that a name is made for each span.
type spanNames struct {
	m atomic.Pointer[map[string]*[2]string] // topic -> publish, process
}

const maxSpanNames = 256

func (n *spanNames) of(process bool, topic string) string {
	i := 0
	if process {
		i = 1
	}
	if topic == "" {
		return [2]string{"publish", "process"}[i]
	}
	m := n.m.Load()
	if m != nil {
		if e := (*m)[topic]; e != nil {
			return e[i]
		}
	}
	e := &[2]string{"publish " + topic, "process " + topic}
	if m == nil || len(*m) < maxSpanNames {
		next := make(map[string]*[2]string, 1+len(mapOrNil(m)))
		for k, v := range mapOrNil(m) {
			next[k] = v
		}
		next[strings.Clone(topic)] = e // the caller's string: its own copy (e's names are new)
		n.m.CompareAndSwap(m, &next)   // lost to another topic's: made again next time
	}
	return e[i]
}

func mapOrNil(m *map[string]*[2]string) map[string]*[2]string {
	if m == nil {
		return nil
	}
	return *m
}

// attributes appends the record span's attributes to attrs: directly made, not through
// the Attr* variables (an indirect call each).
func (r *RecordSpan) attributes(attrs []attribute.KeyValue, messageID string, err error) []attribute.KeyValue {
	if r.process {
		attrs = append(attrs, attrSystemPulsar, attrOpProcess, attrOpNameProcess, semconv.MessagingDestinationName(r.topic),
			semconv.MessagingMessageBodySize(int(r.size)), semconv.MessagingConsumerGroupName(r.group))
	} else {
		attrs = append(attrs, attrSystemPulsar, attrOpPublish, semconv.MessagingDestinationName(r.topic), semconv.MessagingMessageBodySize(int(r.size)))
	}
	if err == nil && messageID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(messageID))
	}
	return attrs
}

// The record spans' constant attributes.
var (
	attrSystemPulsar  = semconv.MessagingSystemPulsar
	attrOpPublish     = semconv.MessagingOperationTypeSend
	attrOpProcess     = semconv.MessagingOperationTypeProcess
	attrOpNameProcess = semconv.MessagingOperationName("process")
)

// presetKey marks a context whose span must get these ids (and, with force, be
// recorded whatever the sampler says): how the bridge makes the SDK start the span it
// already decided on.
type presetKey struct{}

type preset struct {
	traceID  trace.TraceID
	spanID   trace.SpanID
	force    bool // the span gets decision and state, whatever the sampler says
	decision sdktrace.SamplingDecision
	state    trace.TraceState
}

// presetCtx is a context (its parent's, if any) that carries a preset: one allocation.
type presetCtx struct {
	context.Context
	p preset
}

func (c *presetCtx) Value(key any) any {
	if key == (presetKey{}) {
		return &c.p
	}
	return c.Context.Value(key)
}

func presetOf(ctx context.Context) *preset {
	p, _ := ctx.Value(presetKey{}).(*preset)
	return p
}

// bridgeSampler is the configured sampler, except that a forced span (a failed record,
// a segment) is always recorded.
type bridgeSampler struct{ sdktrace.Sampler }

func (s bridgeSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if pre := presetOf(p.ParentContext); pre != nil && pre.force {
		return sdktrace.SamplingResult{Decision: pre.decision, Tracestate: pre.state}
	}
	return s.Sampler.ShouldSample(p)
}

// idGenerator makes random ids, or the ones a preset context names.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p := presetOf(ctx); p != nil && p.traceID.IsValid() {
		return p.traceID, p.spanID
	}
	return newTraceID(), newSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if p := presetOf(ctx); p != nil && p.spanID.IsValid() {
		return p.spanID
	}
	return newSpanID()
}

func newTraceID() (id trace.TraceID) {
	for {
		a, b := rand.Uint64(), rand.Uint64()
		if a|b != 0 {
			binary.LittleEndian.PutUint64(id[:8], a)
			binary.LittleEndian.PutUint64(id[8:], b)
			return id
		}
	}
}

// newRootIDs gives r a new root's ids from two random words: the trace id is both, the
// span id a mix of both (splitmix64's finaliser, never zero). A span id need only be
// unique within its trace, and this trace is new. Written in place: no id arrays copied.
func (r *RecordSpan) newRootIDs() {
	a, b := rand.Uint64(), rand.Uint64()
	for a|b == 0 {
		a, b = rand.Uint64(), rand.Uint64()
	}
	binary.LittleEndian.PutUint64(r.tid[:8], a)
	binary.LittleEndian.PutUint64(r.tid[8:], b)
	x := a ^ bits.RotateLeft64(b, 31)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	if x == 0 {
		x = 1
	}
	binary.LittleEndian.PutUint64(r.sid[:], x)
}

func newSpanID() (id trace.SpanID) {
	for {
		if v := rand.Uint64(); v != 0 {
			binary.LittleEndian.PutUint64(id[:], v)
			return id
		}
	}
}

// ParseTraceparent reads the W3C trace context a message carries in its properties
// (traceparent, tracestate) as OpenTelemetry's propagator (v1.47) does, without its
// context allocations: lower-case hex only; version ff refused; version 00 with no
// reserved flag bits and nothing after the flags (but a "-", which the propagator lets
// through); a later version's extra fields ignored; the sampled and random flags kept. ok is false when there is none or it is malformed.
// (TestParseTraceparentAgreesWithThePropagator.)
func ParseTraceparent(props map[string]string) (sc trace.SpanContext, ok bool) {
	tp := props["traceparent"]
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' || (len(tp) > 55 && tp[55] != '-') {
		return sc, false
	}
	vh, vl, fh, fl := unhex[tp[0]], unhex[tp[1]], unhex[tp[53]], unhex[tp[54]]
	bad := vh | vl | fh | fl
	version, flags := vh<<4|vl, fh<<4|fl
	var cfg trace.SpanContextConfig
	for i := range cfg.TraceID {
		hi, lo := unhex[tp[3+2*i]], unhex[tp[4+2*i]]
		cfg.TraceID[i] = hi<<4 | lo
		bad |= hi | lo
	}
	for i := range cfg.SpanID {
		hi, lo := unhex[tp[36+2*i]], unhex[tp[37+2*i]]
		cfg.SpanID[i] = hi<<4 | lo
		bad |= hi | lo
	}
	if bad&0xf0 != 0 || version == 0xff || (version == 0 && (len(tp) > 56 || flags > 3)) || !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return sc, false
	}
	cfg.TraceFlags = trace.TraceFlags(flags) & (trace.FlagsSampled | trace.FlagsRandom)
	cfg.Remote = true
	if len(props) > 1 { // a tracestate can be there
		if st := props["tracestate"]; st != "" {
			cfg.TraceState, _ = trace.ParseTraceState(st) // as OpenTelemetry's propagator: a bad one is dropped
		}
	}
	return trace.NewSpanContext(cfg), true
}

// unhex[c] is the value of the lower-case hex digit c, 0xff for any other byte (the
// propagator's table: a single check of the OR of all finds any bad digit).
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// Segments cuts one stream's life into segment spans ("segment POST <route>", "segment
// GET <stream>"), so an endless stream's traces complete while it lives: a segment ends
// after tracing.segmentRecords records or tracing.segmentInterval, whichever
// comes first (an idle stream's segment ends on time too), carrying the counts of its
// records and the stream's so far. Each segment is a root span linked to the stream's
// span; each record's span links to its segment. Segments are always recorded (a few
// spans a minute per stream), so the links of sampled records lead somewhere.
//
// A nil *Segments (tracing off) does nothing.
type Segments struct {
	t      *Tracing
	name   string
	stream trace.SpanContext

	mu     sync.Mutex
	span   trace.Span // the current segment, nil between segments
	sc     trace.SpanContext
	timer  *time.Timer
	index  int64 // of the current (or next) segment
	n      int64 // records in the current segment
	bytes  int64
	total  int64
	closed bool

	// The stream's records settled so far: counted by its collector, per record, while
	// its reader writes the fields above (Next): on a cache line of their own, or each
	// side's writes stall the other's (false sharing: Next took 3x as long).
	_                 [64]byte
	published, failed atomic.Int64
	_                 [48]byte
}

// NewSegments cuts the stream whose span is stream into segments named "segment " + name.
func (t *Tracing) NewSegments(name string, stream trace.SpanContext) *Segments {
	if !t.Enabled {
		return nil
	}
	return &Segments{t: t, name: "segment " + name, stream: stream}
}

// Next counts a record of size bytes into the current segment (beginning one if none
// is open, or if the current one is full) and returns the segment's context, for the
// record's span to link to.
func (s *Segments) Next(size int64) trace.SpanContext {
	if s == nil {
		return trace.SpanContext{}
	}
	s.mu.Lock()
	if s.span != nil && s.n >= s.t.segment.records {
		s.endLocked()
	}
	if s.span == nil && !s.closed {
		s.startLocked()
	}
	s.n++
	s.bytes += size
	s.total++
	sc := s.sc
	s.mu.Unlock()
	return sc
}

// Settled counts published and failed more of the stream's records as settled. A
// collector that settles records in runs counts a run at once (ingress: up to
// settledRun records, and whenever it waits), not an atomic add per record.
func (s *Segments) Settled(published, failed int64) {
	if s == nil {
		return
	}
	if failed != 0 {
		s.failed.Add(failed)
	}
	if published != 0 {
		s.published.Add(published)
	}
}

// Close ends the current segment: the stream ended.
func (s *Segments) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	if s.span != nil {
		s.endLocked()
	}
	s.mu.Unlock()
}

func (s *Segments) startLocked() {
	ctx := &presetCtx{Context: context.Background(), p: preset{force: true, decision: sdktrace.RecordAndSample}}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int64("bridge.segment.index", s.index))}
	if s.stream.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: s.stream}))
	}
	_, s.span = s.t.Tracer.Start(ctx, s.name, opts...)
	s.sc = s.span.SpanContext()
	index := s.index
	s.timer = time.AfterFunc(s.t.segment.interval, func() { s.expire(index) })
}

// expire ends segment index when its time is up, if it is still the current one.
func (s *Segments) expire(index int64) {
	s.mu.Lock()
	if s.span != nil && s.index == index {
		s.endLocked()
	}
	s.mu.Unlock()
}

func (s *Segments) endLocked() {
	s.timer.Stop()
	s.span.SetAttributes(attribute.Int64("bridge.segment.records", s.n), attribute.Int64("bridge.segment.bytes", s.bytes),
		attribute.Int64("bridge.stream.records", s.total), attribute.Int64("bridge.stream.published", s.published.Load()),
		attribute.Int64("bridge.stream.failed", s.failed.Load()))
	s.span.End()
	s.span = nil
	s.n, s.bytes = 0, 0
	s.index++
}
