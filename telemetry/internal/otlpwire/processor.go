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
	"google.golang.org/protobuf/encoding/protowire"
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
// each sampled span at once, into a scratch buffer outside any lock (spans ended on many
// goroutines at once are encoded in parallel), then copies it into the pending request
// (grouped by resource and instrumentation scope as Encode groups a batch) under a mutex
// held only for that copy, with no channel send per span. A batch keeps its spans in
// chunks of up to chunkBytes, so it grows without moving what it holds; the chunks of
// sent batches are reused, up to keptBufferBytes of them. A batch full
// (MaxExportBatchSize spans, or half of the Sender's request limit in bytes) or
// ScheduleDelay after the last export is handed to one export goroutine. At most
// MaxQueueSize spans wait (in the pending batch and the full ones not yet sent); past
// that, as the SDK's queue, a span is dropped and counted (Dropped).
//
// Its contract is a differential test against the SDK (processor_test.go): the same
// spans through a Processor and through a BatchSpanProcessor around the official OTLP
// exporter make equal requests.
type Processor struct {
	s Sender
	o ProcessorOptions
	// maxBytes is a batch's encoded spans' limit.
	maxBytes int

	mu sync.Mutex
	// held is the spans in cur and queue, on mu's cache line: the one shared line a
	// span writes besides its batch's. full says held reached MaxQueueSize, and closed
	// that Shutdown began: both written under mu only when they change (rarely: a line
	// each core keeps a copy of), read without it by OnEnd to skip encoding a span it
	// would not take.
	held int
	// endedLocked counts the sampled spans that reached the lock (a plain count under mu,
	// on its line), endedEarly those turned away before it: Ended.
	endedLocked int64
	cur         *batch   // being filled (nil: none yet)
	queue       []item   // full batches and flush marks, oldest first
	free        []*batch // emptied batches for reuse (they hold no chunk): at most maxFreeBatches
	// chunks are emptied span chunks for reuse, each chunkBytes: at most
	// keptBufferBytes in all.
	chunks [][]byte
	made   int64 // bytes of chunks made, not reused (tests look)
	full   atomic.Bool
	closed atomic.Bool

	dropped    atomic.Int64
	endedEarly atomic.Int64
	wake       chan struct{} // cap 1: the export goroutine has work
	stop       chan struct{} // closed by Shutdown
	done       chan struct{} // closed when the export goroutine ends
	ctx        context.Context
	cancel     context.CancelFunc
	unhook     func() bool
	once       sync.Once
	shutErr    error
	out        []byte // the export goroutine's request buffer
	exported   func(int, error)
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
	// falls behind by several batches.
	maxFreeBatches = 8
	// chunkBytes is the size of the chunks a batch keeps its encoded spans in: a batch
	// grows by a chunk, never by moving what it holds (a batch of 4 096 spans grown by
	// doubling one buffer copied ~2 MiB under the lock, and allocated it anew whenever
	// more batches waited than could be kept).
	chunkBytes      = 32 << 10
	firstChunkBytes = 1 << 10
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

// Dropped is how many sampled spans were dropped because MaxQueueSize spans waited.
func (p *Processor) Dropped() int64 { return p.dropped.Load() }

// Ended is how many sampled spans have ended (were given to OnEnd), whether taken,
// dropped, or turned away after Shutdown: a count the SDK's pipeline keeps in a
// processor of its own, kept here without one more shared write per span.
func (p *Processor) Ended() int64 {
	p.mu.Lock()
	n := p.endedLocked
	p.mu.Unlock()
	return n + p.endedEarly.Load()
}

// OnStart does nothing.
func (*Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd encodes s into the pending batch, if it is sampled and there is room.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if s == nil || !s.SpanContext().IsSampled() {
		return
	}
	if p.closed.Load() {
		p.endedEarly.Add(1)
		return
	}
	if p.full.Load() {
		p.dropped.Add(1)
		p.endedEarly.Add(1)
		return
	}
	// Encoded outside the lock (so goroutines ending spans at once do not wait for each
	// other's encoding), into a scratch buffer, copied into the batch under it.
	res, scope := s.Resource(), s.InstrumentationScope()
	sp := spanScratch.Get().(*scratch)
	enc := appendSpanField(sp.buf[:0], s, &sp.kvs)
	p.mu.Lock()
	p.endedLocked++
	switch {
	case p.closed.Load():
	case p.held >= p.o.MaxQueueSize:
		p.dropped.Add(1)
	default:
		b := p.cur
		if b == nil {
			b = p.newBatchLocked()
			p.cur = b
		}
		p.addLocked(b, res, scope, enc)
		if p.held++; p.held >= p.o.MaxQueueSize {
			p.full.Store(true)
		}
		if b.n >= p.o.MaxExportBatchSize || b.bytes >= p.maxBytes {
			p.cutLocked()
		}
	}
	p.mu.Unlock()
	if cap(enc) <= maxScratchBytes {
		sp.buf = enc[:0]
		spanScratch.Put(sp)
	}
}

// scratch is where OnEnd encodes a span, and what it remembers of the spans it encoded
// there before (encoded bytes only, nothing of a caller's).
type scratch struct {
	buf []byte
	kvs kvCache
}

// spanScratch holds OnEnd's scratches; one whose buffer grew past maxScratchBytes (a
// span that large) is not kept.
var spanScratch = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 1024)} }}

const maxScratchBytes = 16 << 10

// appendSpanField appends s as a ScopeSpans' spans field: key, length and AppendSpan
// (with c's attributes, when not nil).
func appendSpanField(b []byte, s sdktrace.ReadOnlySpan, c *kvCache) []byte {
	b = append(b, fSSSpans<<3|byte(protowire.BytesType), 0, 0) // spanLengthReserve: 2
	start := len(b)
	b = appendSpan(b, s, c)
	if n := len(b) - start; n >= 1<<7 && n < 1<<14 { // two bytes, as reserved: written in place
		b[start-2], b[start-1] = byte(n)|0x80, byte(n>>7)
		return b
	}
	return closeLen(b, start, spanLengthReserve)
}

func (p *Processor) newBatchLocked() *batch {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return b
	}
	return &batch{}
}

// addLocked appends enc, a span encoded by appendSpanField, of resource res and scope
// scope, to b: into its group's last chunk, or a new one.
func (p *Processor) addLocked(b *batch, res *resource.Resource, scope instrumentation.Scope, enc []byte) {
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
	k := len(g.chunks) - 1
	if k < 0 || cap(g.chunks[k])-len(g.chunks[k]) < len(enc) {
		k++
		g.chunks = append(g.chunks, p.chunkLocked(len(enc), k))
	}
	g.chunks[k] = append(g.chunks[k], enc...)
	b.bytes += len(enc)
	b.n++
	b.last = gi
}

// chunkLocked is an empty chunk with room for need bytes, to be a group's chunk k: a
// kept one, or a new one, which is firstChunkBytes for a group's first, twice the size
// for each next, up to chunkBytes (or exactly need bytes, when more): a batch of few
// spans holds little, and all that is kept (keptBufferBytes) bounds what many hold.
func (p *Processor) chunkLocked(need, k int) []byte {
	if n := len(p.chunks); n > 0 && need <= chunkBytes {
		c := p.chunks[n-1]
		p.chunks[n-1] = nil
		p.chunks = p.chunks[:n-1]
		return c
	}
	c := make([]byte, 0, max(need, min(chunkBytes, firstChunkBytes<<min(k, 16))))
	p.made += int64(cap(c))
	return c
}

// recycleLocked keeps b's chunks (those of chunkBytes, up to keptBufferBytes in all)
// and b itself (up to maxFreeBatches) for reuse, emptied.
func (p *Processor) recycleLocked(b *batch) {
	for i := range b.groups {
		g := &b.groups[i]
		for j, c := range g.chunks {
			if cap(c) == chunkBytes && (len(p.chunks)+1)*chunkBytes <= keptBufferBytes {
				p.chunks = append(p.chunks, c[:0])
			}
			g.chunks[j] = nil
		}
	}
	b.reset()
	if len(p.free) < maxFreeBatches {
		p.free = append(p.free, b)
	}
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
	p.mu.Lock()
	p.recycleLocked(b) // all of it is in p.out now
	p.mu.Unlock()
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
	p.mu.Lock()
	if p.held -= n; p.held < p.o.MaxQueueSize && p.full.Load() {
		p.full.Store(false)
	}
	p.mu.Unlock()
}

// ForceFlush sends every span ended so far and returns once they are sent, or ctx ends.
func (p *Processor) ForceFlush(ctx context.Context) error {
	p.mu.Lock()
	if p.closed.Load() {
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
		p.closed.Store(true)
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
	// chunks hold the Span fields (ScopeSpans.spans), each with its key and length, in
	// order: a span is never split between two.
	chunks [][]byte
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
		g.res, g.ri, g.scope, g.chunks = res, ri, scope, g.chunks[:0]
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
			for _, c := range g.chunks {
				out = append(out, c...)
			}
			out = appendString(out, fSSSchemaURL, g.scope.SchemaURL)
			out = closeLen(out, ss, outerLengthReserve)
		}
		out = appendString(out, fRSSchemaURL, b.resources[ri].res.SchemaURL())
		out = closeLen(out, rs, outerLengthReserve)
	}
	return out
}

// reset empties b; it keeps no resource, scope or chunk (recycleLocked takes them).
func (b *batch) reset() {
	b.n, b.bytes, b.last = 0, 0, -1
	clear(b.resources)
	b.resources = b.resources[:0]
	for i := range b.groups {
		g := &b.groups[i]
		g.res, g.scope = nil, instrumentation.Scope{}
		clear(g.chunks)
		g.chunks = g.chunks[:0]
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
