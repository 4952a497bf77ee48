package otlpwire

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Sender sends one encoded ExportTraceServiceRequest of spans spans: an Exporter is one
// (SendRequest). reusable says the caller may write body again (the transport keeps
// nothing of it).
type Sender interface {
	SendRequest(ctx context.Context, body []byte, spans int) (reusable bool, err error)
	Shutdown(ctx context.Context) error
}

// ProcessorOptions are a Processor's batching, as the SDK's BatchSpanProcessorOptions.
type ProcessorOptions struct {
	MaxQueueSize       int           // spans held, not yet exported; past it, spans are dropped (Dropped)
	MaxExportBatchSize int           // spans per request
	ScheduleDelay      time.Duration // a batch not yet full is sent after this long
	ExportTimeout      time.Duration // of each request (0: none besides the Sender's own)
	// Cut, when it ends, ends every export under way or to come (nil: never).
	Cut context.Context
	// Exported, when set, is told after each request how many spans it carried and its
	// error (nil: the collector accepted them).
	Exported func(spans int, err error)
}

// Processor is an sdktrace.SpanProcessor that does the work of the SDK's
// BatchSpanProcessor around an otlpwire Exporter without keeping spans: OnEnd encodes
// each sampled span at once into the pending request (grouped by resource and
// instrumentation scope as Encode groups a batch), under a mutex, with no channel send
// per span. A batch full (MaxExportBatchSize spans, or half of the Sender's request
// limit in bytes) or ScheduleDelay after the last export is handed to one export
// goroutine. At most MaxQueueSize spans wait (in the pending batch and the full ones not
// yet sent); past that, as the SDK's queue, a span is dropped and counted (Dropped).
//
// Its contract is a differential test against the SDK (processor_test.go): the same
// spans through a Processor and through a BatchSpanProcessor around the official OTLP
// exporter make equal requests.
//
// OnEnd keeps nothing of the span it is given once it returns (EndKeepsNoSpan), so a
// span's maker may reuse it.
type Processor struct {
	s Sender
	o ProcessorOptions
	// maxBytes is a batch's encoded spans' limit.
	maxBytes int

	mu     sync.Mutex
	cur    *batch   // being filled (nil: none yet)
	queue  []item   // full batches and flush marks, oldest first
	held   int      // spans in cur and queue
	free   []*batch // emptied batches for reuse: at most maxFreeBatches, keptBufferBytes of buffers in all
	freeB  int      // the free batches' buffers' bytes
	closed bool

	dropped  atomic.Int64
	wake     chan struct{} // cap 1: the export goroutine has work
	stop     chan struct{} // closed by Shutdown
	done     chan struct{} // closed when the export goroutine ends
	ctx      context.Context
	cancel   context.CancelFunc
	unhook   func() bool
	once     sync.Once
	shutErr  error
	out      []byte // the export goroutine's request buffer
	exported func(int, error)
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// item is a full batch to send, or a ForceFlush's mark (flushed closes once every batch
// before it was sent).
type item struct {
	b       *batch
	flushed chan struct{}
}

// Defaults are the SDK's BatchSpanProcessor's.
const (
	defaultMaxQueue      = sdktrace.DefaultMaxQueueSize
	defaultMaxBatch      = sdktrace.DefaultMaxExportBatchSize
	defaultScheduleDelay = sdktrace.DefaultScheduleDelay * time.Millisecond
	// maxFreeBatches: with many streams ending spans on few cores the export goroutine
	// falls behind by several batches; keeping only two made each later one grow its
	// buffer anew (garbage, then GC) under load.
	maxFreeBatches = 8
)

// NewProcessor starts a Processor sending through s; Shutdown ends it. Zero options take
// the SDK's defaults; a batch size past the queue size is cut to it.
func NewProcessor(s Sender, o ProcessorOptions) *Processor {
	if o.MaxQueueSize <= 0 {
		o.MaxQueueSize = defaultMaxQueue
	}
	if o.MaxExportBatchSize <= 0 {
		o.MaxExportBatchSize = defaultMaxBatch
	}
	o.MaxExportBatchSize = min(o.MaxExportBatchSize, o.MaxQueueSize)
	if o.ScheduleDelay <= 0 {
		o.ScheduleDelay = defaultScheduleDelay
	}
	maxBytes := defaultMaxRequest / 2
	if e, ok := s.(*Exporter); ok {
		maxBytes = e.cfg.MaxRequestBytes / 2
	}
	p := &Processor{s: s, o: o, maxBytes: maxBytes, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		exported: o.Exported}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if o.Cut != nil {
		p.unhook = context.AfterFunc(o.Cut, p.cancel)
	}
	go p.run()
	return p
}

// EndKeepsNoSpan says OnEnd keeps nothing of its span once it returns.
func (*Processor) EndKeepsNoSpan() {}

// Dropped is how many sampled spans were dropped because MaxQueueSize spans waited.
func (p *Processor) Dropped() int64 { return p.dropped.Load() }

// OnStart does nothing.
func (*Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd encodes s into the pending batch, if it is sampled and there is room.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if s == nil || !s.SpanContext().IsSampled() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.held >= p.o.MaxQueueSize {
		p.dropped.Add(1)
		return
	}
	b := p.cur
	if b == nil {
		b = p.newBatchLocked()
		p.cur = b
	}
	b.add(s)
	p.held++
	if b.n >= p.o.MaxExportBatchSize || b.bytes >= p.maxBytes {
		p.cutLocked()
	}
}

func (p *Processor) newBatchLocked() *batch {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.freeB -= b.capacity()
		return b
	}
	return &batch{}
}

// cutLocked queues the pending batch, if it has spans, for the export goroutine.
func (p *Processor) cutLocked() {
	if p.cur == nil || p.cur.n == 0 {
		return
	}
	p.queue = append(p.queue, item{b: p.cur})
	p.cur = nil
	p.signal()
}

func (p *Processor) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run is the export goroutine: it sends full batches as they come, the pending one
// every ScheduleDelay, and, once Shutdown begins, everything left.
func (p *Processor) run() {
	defer close(p.done)
	t := time.NewTimer(p.o.ScheduleDelay)
	defer t.Stop()
	for {
		select {
		case <-p.wake:
			if p.drain() {
				t.Reset(p.o.ScheduleDelay) // as the SDK's: the delay counts from the last export
			}
		case <-t.C:
			p.mu.Lock()
			p.cutLocked()
			p.mu.Unlock()
			p.drain()
			t.Reset(p.o.ScheduleDelay)
		case <-p.stop:
			p.drain()
			return
		}
	}
}

// drain sends the queue's batches in order and answers its flush marks; sent says a
// batch was.
func (p *Processor) drain() (sent bool) {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return sent
		}
		it := p.queue[0]
		p.queue[0] = item{}
		p.queue = p.queue[1:]
		if len(p.queue) == 0 {
			p.queue = p.queue[:0:0] // let the emptied array go; a new one is small
		}
		p.mu.Unlock()
		if it.flushed != nil {
			close(it.flushed)
			continue
		}
		p.send(it.b)
		sent = true
	}
}

// send exports batch b and recycles it.
func (p *Processor) send(b *batch) {
	n := b.n
	p.out = b.request(p.out[:0])
	ctx, cancel := p.ctx, context.CancelFunc(func() {})
	if p.o.ExportTimeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, p.o.ExportTimeout, errors.New("otlpwire: processor export timeout"))
	}
	reusable, err := p.s.SendRequest(ctx, p.out, n)
	cancel()
	if !reusable || cap(p.out) > keptBufferBytes {
		p.out = nil
	}
	if err != nil {
		otel.Handle(err)
	}
	if p.exported != nil {
		p.exported(n, err)
	}
	b.reset()
	p.mu.Lock()
	p.held -= n
	if c := b.capacity(); len(p.free) < maxFreeBatches && p.freeB+c <= keptBufferBytes {
		p.free = append(p.free, b)
		p.freeB += c
	}
	p.mu.Unlock()
}

// ForceFlush sends every span ended so far and returns once they are sent, or ctx ends.
func (p *Processor) ForceFlush(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.cutLocked()
	ch := make(chan struct{})
	p.queue = append(p.queue, item{flushed: ch})
	p.signal()
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown sends every span ended so far and stops: spans ended later are ignored. When
// ctx ends first, the exports under way and to come are cut (they fail, and are told to
// Exported so), and Shutdown returns ctx's error once the export goroutine has ended.
// The Sender is shut down then.
func (p *Processor) Shutdown(ctx context.Context) error {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.cutLocked()
		p.mu.Unlock()
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.shutErr = ctx.Err()
			p.cancel()
			<-p.done
		}
		p.cancel()
		if p.unhook != nil {
			p.unhook()
		}
		// Any ForceFlush still waiting: nothing is left to send.
		p.mu.Lock()
		for _, it := range p.queue {
			if it.flushed != nil {
				close(it.flushed)
			}
		}
		p.queue = nil
		p.mu.Unlock()
		if err := p.s.Shutdown(ctx); p.shutErr == nil {
			p.shutErr = err
		}
	})
	return p.shutErr
}

// batch is one request being built: each resource's and scope's spans encoded, in the
// order their groups first appear.
type batch struct {
	n, bytes  int
	resources []batchResource
	groups    []batchGroup
	last      int // the group of the last span added (-1: none)
}

type batchResource struct {
	key attribute.Distinct
	res *resource.Resource // the first with these attributes
}

type batchGroup struct {
	res   *resource.Resource // of the group's first span
	ri    int                // into resources
	scope instrumentation.Scope
	spans []byte // Span fields (ScopeSpans.spans), each with its key and length
}

func (b *batch) add(s sdktrace.ReadOnlySpan) {
	res, scope := s.Resource(), s.InstrumentationScope()
	gi := -1
	if b.n > 0 {
		if g := &b.groups[b.last]; g.res == res && g.scope == scope {
			gi = b.last
		}
	}
	if gi < 0 {
		gi = b.group(res, scope)
	}
	g := &b.groups[gi]
	before := len(g.spans)
	var start int
	g.spans, start = openLen(g.spans, fSSSpans, spanLengthReserve)
	g.spans = AppendSpan(g.spans, s)
	g.spans = closeLen(g.spans, start, spanLengthReserve)
	b.bytes += len(g.spans) - before
	b.n++
	b.last = gi
}

// group finds (or adds) the group of res and scope: the same resource attribute set (the
// first resource's schema URL is the group's, as the official exporter keeps the first)
// and the same scope.
func (b *batch) group(res *resource.Resource, scope instrumentation.Scope) int {
	key := res.Equivalent()
	ri := -1
	for i := range b.resources {
		if b.resources[i].key == key {
			ri = i
			break
		}
	}
	if ri < 0 {
		ri = len(b.resources)
		b.resources = append(b.resources, batchResource{key: key, res: res})
	}
	for i := range b.groups {
		if g := &b.groups[i]; g.ri == ri && g.scope == scope {
			return i
		}
	}
	gi := len(b.groups)
	if gi < cap(b.groups) {
		b.groups = b.groups[:gi+1]
		g := &b.groups[gi]
		g.res, g.ri, g.scope, g.spans = res, ri, scope, g.spans[:0]
	} else {
		b.groups = append(b.groups, batchGroup{res: res, ri: ri, scope: scope})
	}
	return gi
}

// request appends b as an ExportTraceServiceRequest to out.
func (b *batch) request(out []byte) []byte {
	for ri := range b.resources {
		var rs int
		out, rs = openLen(out, fReqResourceSpans, outerLengthReserve)
		out = appendResource(out, b.resources[ri].res)
		for gi := range b.groups {
			g := &b.groups[gi]
			if g.ri != ri {
				continue
			}
			var ss int
			out, ss = openLen(out, fRSScopeSpans, outerLengthReserve)
			out = appendScope(out, g.scope)
			out = append(out, g.spans...)
			out = appendString(out, fSSSchemaURL, g.scope.SchemaURL)
			out = closeLen(out, ss, outerLengthReserve)
		}
		out = appendString(out, fRSSchemaURL, b.resources[ri].res.SchemaURL())
		out = closeLen(out, rs, outerLengthReserve)
	}
	return out
}

// capacity is the bytes of b's span buffers.
func (b *batch) capacity() int {
	n := 0
	all := b.groups[:cap(b.groups)]
	for i := range all {
		n += cap(all[i].spans)
	}
	return n
}

// reset empties b, keeping its buffers unless they are large; it keeps no resource or
// scope.
func (b *batch) reset() {
	b.n, b.bytes, b.last = 0, 0, -1
	clear(b.resources)
	b.resources = b.resources[:0]
	for i := range b.groups {
		g := &b.groups[i]
		g.res, g.scope = nil, instrumentation.Scope{}
		if cap(g.spans) > keptBufferBytes {
			g.spans = nil
		}
		g.spans = g.spans[:0]
	}
	b.groups = b.groups[:0]
}

// SendRequest sends body, an encoded request of spans spans, as ExportSpans sends the
// request it encodes: one export at a time, retried until the export's timeout, ctx or
// Shutdown ends it.
func (e *Exporter) SendRequest(ctx context.Context, body []byte, spans int) (reusable bool, err error) {
	if len(body) == 0 {
		return true, nil
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return true, ctx.Err()
	case <-e.stop.Done():
		return true, ErrShutdown
	}
	defer func() { <-e.sem }()
	if e.shutdown.Load() {
		return true, ErrShutdown
	}
	if len(body) > e.cfg.MaxRequestBytes {
		return true, fmt.Errorf("%w: %d spans encode to %d bytes, more than %d", ErrRequestTooLarge, spans, len(body), e.cfg.MaxRequestBytes)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.cfg.Timeout, errors.New("otlpwire: export timeout"))
	defer cancel()
	unhook := context.AfterFunc(e.stop, cancel)
	defer unhook()
	resp, err := e.sendWithRetry(ctx, body)
	reusable = !e.tr.bufferKept()
	if err != nil {
		return reusable, err
	}
	if ps, ok := parsePartialSuccess(resp); ok {
		e.rejected.Add(ps.RejectedSpans)
		otel.Handle(ps)
	}
	return reusable, nil
}
