package egress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// options are a stream's settings after the client's query overrides.
type options struct {
	subscription, position, ack, envelope string
}

var queryValues = map[string][]string{
	"ack":      {"auto", "client"},
	"envelope": {"none", "json"},
}

// resolveQuery applies the query parameters the stream allows, refusing any other.
func resolveQuery(def *mapping.Stream, req *http.Request) (options, error) {
	o := options{subscription: def.Subscription, position: def.Position, ack: def.Ack, envelope: def.Envelope}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return o, fmt.Errorf("the query %.64q is malformed: %v", req.URL.RawQuery, err)
	}
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if len(q[k]) > 1 {
			return o, fmt.Errorf("query parameter %q given %d times", k, len(q[k]))
		}
		v := q.Get(k)
		dst := map[string]*string{"subscription": &o.subscription, "position": &o.position, "ack": &o.ack, "envelope": &o.envelope}[k]
		if dst == nil {
			return o, fmt.Errorf("unknown query parameter %q (known: subscription, position, ack, envelope)", k)
		}
		if !def.Allows(k) {
			return o, fmt.Errorf("stream %s does not let clients choose %s (streams[].overrides)", def.Name, k)
		}
		if k == "position" {
			if _, err := config.ParsePosition(v); err != nil {
				return o, fmt.Errorf("position: %v", err)
			}
		} else if allowed, ok := queryValues[k]; ok {
			found := false
			for _, a := range allowed {
				found = found || a == v
			}
			if !found {
				return o, fmt.Errorf("%s=%q is not one of %s", k, v, strings.Join(allowed, ", "))
			}
		}
		if k == "subscription" && !validSubscription(v) {
			return o, fmt.Errorf("subscription=%.64q is not a subscription name (1 to %d printable ASCII characters, no '/' or space)", v, maxSubscriptionName)
		}
		*dst = v
	}
	return o, nil
}

// maxSubscriptionName bounds a subscription name a client chooses (subscription=).
const maxSubscriptionName = 256

// validSubscription reports whether a client may name a subscription v: the broker
// keeps it, and admin tools must be able to name it back in a URL path.
func validSubscription(v string) bool {
	if v == "" || len(v) > maxSubscriptionName {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '/' {
			return false
		}
	}
	return true
}

// stream is one open GET: its goroutine receives messages, writes them as records,
// flushes when nothing more is at hand, and acknowledges (ack=auto) what it flushed.
type stream struct {
	srv        *Server
	c          echo.Context
	ctx        context.Context     // carries the response span
	span       trace.Span          // the response span, ended by Handle
	segments   *telemetry.Segments // with tracing on
	rc         *http.ResponseController
	def        *mapping.Stream
	opts       options
	sub        Subscription
	id         string
	recordType string
	// conv, when set, converts each record from storedType (the stream's own) to recordType.
	conv       Converter
	storedType string
	limits     Limits

	writeErr error // a record could not be written whole
	direct   int64 // bytes written through since the last flush

	mu       sync.Mutex
	unacked  map[string]*unackedEntry // ack=client: delivered, not acknowledged
	byPos    map[int64]string         // ack=client: the id of each unacknowledged record by position
	retrying map[string]string        // nacked, not delivered again yet: id -> topic
	ackWake  chan struct{}
	redelive int64
	// setAsideFails counts the failed dead-letterings of undecodable messages by id, for
	// their backoff where the broker counts no redeliveries (exclusive, failover).
	setAsideFails map[string]uint32
	// asides queues what the stream dead-letters, for its dead-letter goroutine (see
	// deadLetters); nil when the stream has no dead-letter topic.
	asides chan *Delivery

	next int64 // the position of the next record written (the loop's)
	// filter is the stream's filter from the table filterOf (the loop's; see filterNow).
	filter   *mapping.Filter
	filterOf *mapping.Table
	pace     pacer // maxRate, maxByteRate (the loop's)

	// A POST <path>/seek hands its request to the loop (seekReq, under mu), and
	// interrupts the loop's wait for a message (recvCancel, under mu); seekMu keeps one
	// at a time; loopDone is closed when the loop has ended.
	seekMu     sync.Mutex
	seekReq    *seekRequest
	recvCancel context.CancelFunc
	loopDone   chan struct{}
}

// pacer spaces a stream's records to at most rate records and byteRate bytes a second
// (0: no limit), with a burst of up to a second's worth: a stream held up for a moment
// (a slow client, a busy machine) catches up on at most one second.
type pacer struct {
	rate, byteRate float64
	tRec, tByte    time.Time // when the next record may go, by each limit
}

const paceBurst = time.Second

// next reserves the sending of one record of size bytes at now and returns how long to
// wait before sending it.
func (p *pacer) next(now time.Time, size int64) time.Duration {
	var at time.Time
	if p.rate > 0 {
		if p.tRec.Before(now.Add(-paceBurst)) {
			p.tRec = now.Add(-paceBurst)
		}
		at = p.tRec
		p.tRec = p.tRec.Add(time.Duration(float64(time.Second) / p.rate))
	}
	if p.byteRate > 0 {
		if p.tByte.Before(now.Add(-paceBurst)) {
			p.tByte = now.Add(-paceBurst)
		}
		if p.tByte.After(at) {
			at = p.tByte
		}
		p.tByte = p.tByte.Add(time.Duration(float64(size) / p.byteRate * float64(time.Second)))
	}
	return max(at.Sub(now), 0)
}

func newStream(s *Server, c echo.Context, ctx context.Context, def *mapping.Stream, o options, sub Subscription, recordType string, l Limits) *stream {
	return &stream{srv: s, c: c, ctx: ctx, segments: s.tr.NewSegments("GET "+def.Name, trace.SpanContextFromContext(ctx)), rc: http.NewResponseController(c.Response()), def: def, opts: o, sub: sub, id: newStreamID(),
		recordType: recordType, limits: l, unacked: map[string]*unackedEntry{},
		byPos: map[int64]string{}, retrying: map[string]string{}, ackWake: make(chan struct{}, 1), loopDone: make(chan struct{}),
		pace: pacer{rate: def.MaxRate, byteRate: float64(def.MaxByteRate)}, asides: asidesFor(def)}
}

var errWriteTimeout = errors.New("the client did not take the stream's data in time")

func (st *stream) run() int64 {
	defer st.sub.Close()
	defer st.segments.Close()
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	// The server's drain ends the stream: a callback on its context, not a goroutine
	// per stream waiting for it.
	defer context.AfterFunc(st.srv.stop, cancel)()
	if err := st.begin(); err != nil {
		return 0
	}
	// The helpers' setup is a function of its own, like the answer's head: run's frame
	// stays on the stack while the stream waits (see Server.Handle).
	defer st.startHelpers(ctx)()
	written, end := st.loop(ctx)
	close(st.loopDone)
	st.logEnd(written, end)
	return written
}

// logEnd logs the stream's end. Not inlined: its arguments would take room in run's
// frame.
//
//go:noinline
func (st *stream) logEnd(written int64, end string) {
	st.srv.log.DebugContext(st.ctx, "egress stream ended", "stream", st.def.Name, "streamId", st.id, "records", written, "reason", end)
}

// loop delivers until the client goes, the server drains, or the topic ends. It returns
// the records written and why it ended.
func (st *stream) loop(ctx context.Context) (int64, string) {
	w := &loopWriter{st: st, heartbeats: st.def.HeartbeatInterval > 0}
	if w.heartbeats {
		w.hbDue = time.Now().Add(st.def.HeartbeatInterval)
	}
	for {
		if ctx.Err() != nil {
			// Drained (or the client went): a busy stream, whose consumer always has a
			// message at hand, would otherwise never look. What is written goes out
			// and is acknowledged; the consumer's queue is redelivered after Close.
			if err := w.send(true); err != nil {
				return w.written, "write: " + err.Error()
			}
			return w.written, context.Cause(ctx).Error()
		}
		if r := st.takeSeek(); r != nil {
			if end := st.seek(ctx, w, r); end != "" {
				return w.written, end
			}
			continue
		}
		if st.opts.ack == "client" && st.unackedCount() >= st.def.MaxUnacked {
			// maxUnacked reached: send what is written, then wait for acks (or their
			// timeout, or a seek, which makes room).
			if err := w.send(true); err != nil {
				return w.written, "write: " + err.Error()
			}
			if err := st.waitForAckRoom(ctx); err != nil {
				return w.written, err.Error()
			}
			continue
		}
		d, end := st.receive(ctx, w)
		if end != "" {
			return w.written, end
		}
		if d == nil {
			continue // interrupted by a seek
		}
		deliver, end := st.screen(ctx, w, d)
		if end != "" {
			return w.written, end
		}
		if !deliver {
			continue
		}
		now, end := st.paced(ctx, w, d)
		if end != "" {
			return w.written, end
		}
		if end := st.write(w, d, now); end != "" {
			return w.written, end
		}
	}
}

// loopWriter is the delivery loop's output side: the records written since the last
// flush, what a flush acknowledges (ack=auto) and reports, and the heartbeat's clock.
type loopWriter struct {
	st                   *stream
	buf                  []byte
	flushed              []*Delivery // ack=auto: written, acknowledged once flushed
	pendingN, pendingLen int64
	newest               time.Time // publish time of the newest record since the last flush
	written              int64
	heartbeats           bool
	hbDue                time.Time // when a heartbeat is due if nothing else is written first
	wrote                bool      // something was written since the heartbeat's clock last restarted
}

// send writes what is buffered; with flush, it flushes the connection, then reports
// the records, acknowledges them (ack=auto) and restarts the heartbeat's clock.
func (w *loopWriter) send(flush bool) error {
	st := w.st
	// The heartbeat's clock restarts on what the client is sent, not on every flush: a
	// stream whose messages its filter leaves out flushes nothing for as long.
	w.wrote = w.wrote || len(w.buf) > 0 || st.direct > 0
	if len(w.buf) > 0 {
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.limits.WriteTimeout))
		if _, err := st.c.Response().Write(w.buf); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	if !flush {
		return nil
	}
	if err := st.flush(); err != nil {
		return err
	}
	st.direct = 0
	if w.pendingN > 0 {
		st.srv.obs.RecordsWritten(st.def.Name, w.pendingN, w.pendingLen, time.Since(w.newest))
		w.pendingN, w.pendingLen = 0, 0
	}
	if st.opts.ack == "auto" {
		for _, d := range w.flushed {
			_ = st.sub.Ack(d)
		}
		if len(w.flushed) > 0 {
			st.srv.obs.Acked(st.def.Name, int64(len(w.flushed)), 0)
		}
		w.flushed = w.flushed[:0]
	}
	if w.heartbeats && w.wrote {
		w.hbDue = time.Now().Add(st.def.HeartbeatInterval)
	}
	w.wrote = false
	return nil
}

// receive takes the next message: at once if the consumer has one at hand; otherwise
// it sends what is written and waits, writing heartbeats when they fall due. A non-empty
// end says why the stream ends instead.
func (st *stream) receive(ctx context.Context, w *loopWriter) (*Delivery, string) {
	if d, ok := st.sub.TryReceive(); ok {
		return d, ""
	}
	// Nothing at hand: what is written goes out now.
	if err := w.send(true); err != nil {
		return nil, "write: " + err.Error()
	}
	var d *Delivery
	var rerr error
	// A seek interrupts the wait (handleSeek cancels wctx).
	wctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	st.mu.Lock()
	st.recvCancel = interrupt
	pending := st.seekReq != nil
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.recvCancel = nil
		st.mu.Unlock()
	}()
	if pending {
		return nil, ""
	}
	for {
		if !w.heartbeats {
			d, rerr = st.sub.Receive(wctx)
			break
		}
		// Wait for a message at most until the next heartbeat is due.
		rctx, rcancel := context.WithTimeout(wctx, time.Until(w.hbDue))
		d, rerr = st.sub.Receive(rctx)
		rcancel()
		if rerr == nil || wctx.Err() != nil || !errors.Is(rerr, context.DeadlineExceeded) {
			break
		}
		w.buf = recordio.AppendRecord(w.buf, st.def.Heartbeat)
		st.next++ // a heartbeat has a position too: positions count the records read
		if err := w.send(true); err != nil {
			return nil, "write: " + err.Error()
		}
	}
	if rerr == nil {
		return d, ""
	}
	if ctx.Err() == nil && wctx.Err() != nil {
		return nil, "" // interrupted by a seek: the loop carries it out
	}
	if errors.Is(rerr, ErrEndOfTopic) {
		_ = w.send(true)
		st.c.Response().Header().Set(trailerStreamEnd, streamEndOfTopic)
		return nil, "end of topic"
	}
	if ctx.Err() == nil {
		// The consumer failed for good: what was written goes out, then the
		// stream ends with the reason in its Stream-Error trailer.
		_ = w.send(true)
		st.failed(rerr)
	}
	return nil, rerr.Error()
}

// screen decides what becomes of d before it is written: left out by the stream's
// filter (acknowledged unseen), converted for the client's
// Message-Accept, set aside for the dead-letter topic (undecodable, not convertible, or
// delivered maxDeliveries times), acknowledged unseen (undecodable without a dead-letter
// topic), or delivered.
func (st *stream) screen(ctx context.Context, w *loopWriter, d *Delivery) (deliver bool, end string) {
	if d.Undecodable == nil {
		out, err := st.filtered(d)
		if err != nil {
			// The body could not be read (its message is gone from the consumer): the
			// stream ends as for a record cut short; the message is delivered again.
			st.sub.Nack(d, 0)
			_ = w.send(true)
			st.failed(err)
			return false, err.Error()
		}
		if out {
			return false, ""
		}
	}
	if st.conv != nil && d.Undecodable == nil {
		if err := st.convert(ctx, d); err != nil {
			if ctx.Err() != nil {
				st.sub.Nack(d, 0)
				return false, ctx.Err().Error()
			}
			if errors.Is(err, ErrUnavailable) || !st.def.DeadLetters() {
				// Not converted, and nowhere to set it aside: what was written goes
				// out, then the stream ends with the reason; the message is delivered
				// again to the next stream.
				st.sub.Nack(d, 0)
				_ = w.send(true)
				st.failed(err)
				return false, err.Error()
			}
			d.Undecodable = err
		}
	}
	if d.Undecodable != nil {
		if !st.def.DeadLetters() {
			// Not asked for (SubscribeOptions.DeliverUndecodable): the consumer's own way.
			_ = st.sub.Ack(d)
			return false, ""
		}
		st.aside(d)
		return false, ""
	}
	if m := st.def.Retry.MaxDeliveries; m > 0 && int64(d.Redeliveries) >= int64(m) {
		// Delivered maxDeliveries times already (its clients went away without an
		// answer, or a dead-lettering failed): it goes aside instead of out. An
		// earlier delivery of it that this stream still holds goes too: it is
		// superseded, and left to its ack timeout it would be dead-lettered again.
		st.mu.Lock()
		old := st.takeLocked(d.ID)
		st.mu.Unlock()
		if old != nil && old.d != d {
			st.release(old.d)
		}
		st.aside(d)
		return false, ""
	}
	return true, ""
}

// paced waits, if maxRate or maxByteRate says so, before d is written, and returns the
// delivery's time (its pacing, its process span's start, its unacknowledged entry).
func (st *stream) paced(ctx context.Context, w *loopWriter, d *Delivery) (time.Time, string) {
	now := time.Now()
	wait := st.pace.next(now, d.Len())
	if wait <= 0 {
		return now, ""
	}
	// Over maxRate or maxByteRate: what is written goes out, then the stream waits.
	// It takes nothing from the consumer meanwhile, so no permits are granted and
	// the backlog stays on the broker.
	if err := w.send(true); err != nil {
		st.sub.Nack(d, 0)
		return now, "write: " + err.Error()
	}
	t := time.NewTimer(wait)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		st.sub.Nack(d, 0) // not written: delivered again
		return now, ctx.Err().Error()
	}
	if o, ok := st.srv.obs.(RateObserver); ok {
		o.RateLimited(st.def.Name, wait)
	}
	return time.Now(), ""
}

// write records d as awaiting its acknowledgement (ack=client) or its flush (ack=auto),
// writes it with its process span, and flushes every flushBytes.
func (st *stream) write(w *loopWriter, d *Delivery, now time.Time) string {
	if st.opts.ack == "client" {
		st.mu.Lock()
		delete(st.retrying, d.ID)
		superseded := st.putLocked(&unackedEntry{d: d, at: now, pos: st.next})
		st.mu.Unlock()
		st.release(superseded)
	} else {
		w.flushed = append(w.flushed, d)
	}
	// The process span continues the context the message carries (or is a root of
	// its own), sampled on its own, linked to the stream's segment.
	size := d.Len()
	var span telemetry.RecordSpan
	st.srv.tr.StartProcess(&span, d.Properties, st.segments.Next(size), d.Topic, st.opts.subscription, size, now)
	w.buf = st.appendRecord(w.buf, d)
	st.next++
	st.srv.tr.EndRecord(&span, d.ID, nil)
	if st.writeErr != nil {
		return "write: " + st.writeErr.Error()
	}
	if st.opts.ack == "client" {
		// Written: the stream keeps only what acknowledging it needs.
		d.Payload, d.Body = nil, nil
	}
	if pc, ok := st.sub.(PayloadCopier); ok {
		// Nothing below, nor after, reads the payload: only its length (size, taken
		// before the write) and the delivery's id and time.
		pc.Copied(d)
	}
	w.written++
	w.pendingN++
	// size, not d.Len(): an ack=client delivery has let go of its payload by now.
	w.pendingLen += size
	w.newest = d.PublishTime
	if int64(len(w.buf))+st.direct >= flushBytes {
		// A busy stream flushes (and acknowledges) every 64 KiB, so acks never wait
		// for the consumer's queue to run dry, and what it holds between flushes is
		// bounded in bytes: large records are written through, not buffered.
		if err := w.send(true); err != nil {
			return "write: " + err.Error()
		}
	}
	return ""
}

func (st *stream) flush() error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.limits.WriteTimeout))
	if err := st.rc.Flush(); err != nil {
		return err
	}
	return nil
}

// failed records why the consumer ended the stream, for its Stream-Error trailer.
func (st *stream) failed(err error) {
	st.c.Response().Header().Set(trailerStreamError, err.Error())
	st.srv.log.WarnContext(st.ctx, "egress stream ended: the consumer failed", "stream", st.def.Name, "streamId", st.id, "error", err.Error())
}

// trailerStreamError is the trailer that says why a stream ended early; trailerStreamEnd
// says "end-of-topic" when the topic was terminated and everything in it delivered. A
// response that ends with neither ended cleanly for another reason (the bridge drained)
// and a client reconnects; one cut has no trailers at all.
const (
	trailerStreamError = "Stream-Error"
	trailerStreamEnd   = "Stream-End"
	streamEndOfTopic   = "end-of-topic"
)
