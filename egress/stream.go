package egress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// options are a stream's settings after the client's query overrides.
type options struct {
	subscription, position, ack, envelope string
}

var queryValues = map[string][]string{
	"position": {"earliest", "latest"},
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
		if allowed, ok := queryValues[k]; ok {
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
	pace pacer // maxRate, maxByteRate (the loop's)
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

type unackedEntry struct {
	d   *Delivery
	at  time.Time
	pos int64 // the record's position in the response: 0, 1, 2, ...
}

// putLocked records e as awaiting its acknowledgement. It returns the delivery e
// supersedes, if the same message was delivered before and is not settled yet; the
// caller releases it (release) once the lock is let go.
func (st *stream) putLocked(e *unackedEntry) (superseded *Delivery) {
	if old := st.unacked[e.d.ID]; old != nil {
		delete(st.byPos, old.pos) // delivered again: its new position counts
		if old.d != e.d {
			superseded = old.d
		}
	}
	st.unacked[e.d.ID] = e
	st.byPos[e.pos] = e.d.ID
	return superseded
}

// release settles a delivery superseded by a redelivery of its message (see Releaser).
func (st *stream) release(d *Delivery) {
	if d == nil {
		return
	}
	if r, ok := st.sub.(Releaser); ok {
		r.Release(d)
	}
}

// take removes and returns the entry of id under the lock; an id that is not there is
// added to unknown, and nil returned.
func (st *stream) take(id string, unknown *[]string) *unackedEntry {
	st.mu.Lock()
	e := st.takeLocked(id)
	st.mu.Unlock()
	if e == nil {
		*unknown = append(*unknown, id)
	}
	return e
}

// takeLocked removes and returns the entry of id, or nil.
func (st *stream) takeLocked(id string) *unackedEntry {
	e := st.unacked[id]
	if e != nil {
		delete(st.unacked, id)
		delete(st.byPos, e.pos)
	}
	return e
}

// putBack returns entries whose acknowledgement failed, unless delivered again meanwhile:
// those are released, superseded by their redelivery (a failed cumulative
// acknowledgement settled nothing).
func (st *stream) putBack(es []*unackedEntry) {
	var superseded []*Delivery
	st.mu.Lock()
	for _, e := range es {
		if again := st.unacked[e.d.ID]; again == nil {
			st.putLocked(e)
		} else if again.d != e.d {
			superseded = append(superseded, e.d)
		}
	}
	st.mu.Unlock()
	for _, d := range superseded {
		st.release(d)
	}
}

func newStream(s *Server, c echo.Context, ctx context.Context, def *mapping.Stream, o options, sub Subscription, recordType string, l Limits) *stream {
	return &stream{srv: s, c: c, ctx: ctx, segments: s.tr.NewSegments("GET "+def.Name, trace.SpanContextFromContext(ctx)), rc: http.NewResponseController(c.Response()), def: def, opts: o, sub: sub, id: newStreamID(),
		recordType: recordType, limits: l, unacked: map[string]*unackedEntry{},
		byPos: map[int64]string{}, retrying: map[string]string{}, ackWake: make(chan struct{}, 1),
		pace: pacer{rate: def.MaxRate, byteRate: float64(def.MaxByteRate)}, asides: asidesFor(def)}
}

// asidesFor is the dead-letter queue of a stream of def, nil when it has no dead-letter topic.
func asidesFor(def *mapping.Stream) chan *Delivery {
	if !def.DeadLetters() {
		return nil
	}
	return make(chan *Delivery, maxQueuedDeadLetters)
}

var errWriteTimeout = errors.New("the client did not take the stream's data in time")

func (st *stream) run() int64 {
	defer st.sub.Close()
	defer st.segments.Close()
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	go func() {
		select {
		case <-st.srv.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res := st.c.Response()
	h := res.Header()
	h.Set("Content-Type", recordio.MediaRecordIO)
	h.Set("Message-Content-Type", st.recordType)
	h.Set("Stream-Id", st.id)
	h.Set("Trailer", trailerStreamError)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	res.WriteHeader(http.StatusOK)
	if err := st.flush(); err != nil {
		return 0
	}
	if st.asides != nil {
		// The dead-letter goroutine is the stream's: it ends after the ack timeouts'
		// goroutine, which feeds it, and before the stream closes the subscription,
		// once it has settled what was queued (dead-lettered, or sent back for
		// redelivery when the publication fails: at once when the client or the
		// server is gone, which cancels ctx).
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.deadLetters(ctx, done)
		}()
		defer func() {
			close(done)
			wg.Wait()
		}()
	}
	if st.opts.ack == "client" {
		// The ack timeouts' goroutine is the stream's: it ends before the stream closes
		// the subscription it nacks on (it never waits on a dead-letter topic itself).
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.expireAcks(ctx, done)
		}()
		defer func() {
			close(done)
			wg.Wait()
		}()
	}
	written, end := st.loop(ctx)
	st.srv.log.DebugContext(st.ctx, "egress stream ended", "stream", st.def.Name, "streamId", st.id, "records", written, "reason", end)
	return written
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
		if st.opts.ack == "client" && st.unackedCount() >= st.def.MaxUnacked {
			// maxUnacked reached: send what is written, then wait for acks (or their timeout).
			if err := w.send(true); err != nil {
				return w.written, "write: " + err.Error()
			}
			if err := st.waitForAckRoom(ctx); err != nil {
				return w.written, err.Error()
			}
		}
		d, end := st.receive(ctx, w)
		if end != "" {
			return w.written, end
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
}

// send writes what is buffered; with flush, it flushes the connection, then reports
// the records, acknowledges them (ack=auto) and restarts the heartbeat's clock.
func (w *loopWriter) send(flush bool) error {
	st := w.st
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
	if w.heartbeats {
		w.hbDue = time.Now().Add(st.def.HeartbeatInterval)
	}
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
	for {
		if !w.heartbeats {
			d, rerr = st.sub.Receive(ctx)
			break
		}
		// Wait for a message at most until the next heartbeat is due.
		rctx, rcancel := context.WithTimeout(ctx, time.Until(w.hbDue))
		d, rerr = st.sub.Receive(rctx)
		rcancel()
		if rerr == nil || ctx.Err() != nil || !errors.Is(rerr, context.DeadlineExceeded) {
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
	if errors.Is(rerr, ErrEndOfTopic) {
		_ = w.send(true)
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

// screen decides what becomes of d before it is written: converted for the client's
// Message-Accept, set aside for the dead-letter topic (undecodable, not convertible, or
// delivered maxDeliveries times), acknowledged unseen (undecodable without a dead-letter
// topic), or delivered.
func (st *stream) screen(ctx context.Context, w *loopWriter, d *Delivery) (deliver bool, end string) {
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
	w.written++
	w.pendingN++
	w.pendingLen += d.Len()
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

func (st *stream) unackedCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.unacked)
}

// waitForAckRoom blocks an ack=client stream while MaxUnacked messages await acks.
func (st *stream) waitForAckRoom(ctx context.Context) error {
	if st.opts.ack != "client" {
		return nil
	}
	for {
		st.mu.Lock()
		n := len(st.unacked)
		st.mu.Unlock()
		if n < st.def.MaxUnacked {
			return nil
		}
		select {
		case <-st.ackWake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// expireAcks redelivers what an ack=client stream has not acknowledged in time.
func (st *stream) expireAcks(ctx context.Context, done <-chan struct{}) {
	every := min(max(st.def.AckTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			var expired []*Delivery
			st.mu.Lock()
			for id, e := range st.unacked {
				if now.Sub(e.at) > st.def.AckTimeout {
					expired = append(expired, e.d)
					st.takeLocked(id)
				}
			}
			st.redelive += int64(len(expired))
			st.mu.Unlock()
			for _, d := range expired {
				// A timeout is a failed attempt: the message waits its backoff, or goes
				// to the dead-letter goroutine; the sweep itself never waits on a
				// dead-letter topic.
				st.retry(ctx, d, "ack_timeout", false)
			}
			if len(expired) > 0 {
				st.srv.log.Info("acknowledgement timeout: messages redelivered", "stream", st.def.Name, "streamId", st.id, "messages", len(expired))
				select {
				case st.ackWake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// retry sends d back for redelivery after its backoff, which grows with the number of
// times it was delivered already; a message delivered retry.maxDeliveries times goes to
// the dead-letter topic instead: at once when wait is set (a client's /nack, whose answer
// says what became of it), through the stream's dead-letter goroutine otherwise. It
// reports whether d was dead-lettered (or, without wait, set aside for it).
func (st *stream) retry(ctx context.Context, d *Delivery, cause string, wait bool) bool {
	if m := st.def.Retry.MaxDeliveries; m > 0 && int64(d.Redeliveries)+1 >= int64(m) {
		if !wait {
			st.aside(d)
			return true
		}
		if st.deadLetter(ctx, d) {
			return true
		}
	}
	if st.def.Type == "exclusive" || st.def.Type == "failover" {
		// Only where acks may be cumulative, and where the message comes back to this
		// consumer (which forgets it then), so the set stays bounded.
		st.mu.Lock()
		st.retrying[d.ID] = d.Topic
		st.mu.Unlock()
	}
	st.sub.Nack(d, st.def.Retry.Delay(d.Redeliveries, rand.Float64()))
	if o, ok := st.srv.obs.(RetryObserver); ok {
		o.Nacked(st.def.Name, cause, d.Redeliveries+1)
	}
	return false
}

// deadLetterTimeout bounds publishing one message to a dead-letter topic (a variable
// for tests).
var deadLetterTimeout = 30 * time.Second

// deadLetter publishes d to the stream's dead-letter topic and then acknowledges it. It
// reports false, leaving d to the caller (unacknowledged), when the publication failed.
func (st *stream) deadLetter(ctx context.Context, d *Delivery) bool {
	o, _ := st.srv.obs.(RetryObserver)
	dl, ok := st.sub.(DeadLetterer)
	if !ok {
		st.srv.log.Error("retry.maxDeliveries reached, but the subscription cannot dead-letter", "stream", st.def.Name, "message", d.ID)
		return false
	}
	topic := st.deadLetterTopic(d)
	ctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
	defer cancel()
	if err := dl.DeadLetter(ctx, d, topic); err != nil {
		st.srv.log.Warn("dead-lettering failed: the message stays unacknowledged and comes again", "stream", st.def.Name,
			"message", d.ID, "deadLetterTopic", topic, "error", err.Error())
		if o != nil {
			o.DeadLettered(st.def.Name, false)
		}
		return false
	}
	if err := st.sub.Ack(d); err != nil {
		// Dead-lettered but not acknowledged: it comes again and is dead-lettered again
		// (a duplicate on the dead-letter topic, never a loss).
		st.srv.log.Warn("acknowledging a dead-lettered message failed", "stream", st.def.Name, "message", d.ID, "error", err.Error())
	}
	st.srv.log.Info("message dead-lettered", "stream", st.def.Name, "message", d.ID, "deliveries", d.Redeliveries+1, "deadLetterTopic", topic)
	if o != nil {
		o.DeadLettered(st.def.Name, true)
	}
	return true
}

// maxQueuedDeadLetters bounds the messages a stream holds for its dead-letter goroutine;
// beyond, a message goes back for redelivery after its backoff instead of waiting.
const maxQueuedDeadLetters = 64

// aside hands d to the stream's dead-letter goroutine without waiting; when its queue is
// full d goes back for redelivery after its backoff, and comes again.
func (st *stream) aside(d *Delivery) {
	if st.def.Type == "exclusive" || st.def.Type == "failover" {
		// Where acks may be cumulative: none may cover d until it is dead-lettered (or
		// comes back), as for a nacked message (see retry).
		st.mu.Lock()
		st.retrying[d.ID] = d.Topic
		st.mu.Unlock()
	}
	select {
	case st.asides <- d:
	default:
		st.nackAside(d)
	}
}

// deadLetters publishes what the stream sets aside, one message at a time, so that
// neither the delivery loop nor the ack-timeout sweep ever waits on a dead-letter topic.
// When a publication fails, what is queued behind it goes back for redelivery after its
// backoff without being tried: a dead-letter topic that is down or frozen costs a
// message at most one deadLetterTimeout of waiting, not one for each message ahead of it.
// Once done is closed (nothing more is queued then) it settles what is left the same way
// and returns.
func (st *stream) deadLetters(ctx context.Context, done <-chan struct{}) {
	for {
		var d *Delivery
		select {
		case d = <-st.asides:
		case <-done:
			select {
			case d = <-st.asides:
			default:
				return
			}
		}
		if st.setAside(ctx, d) {
			continue
		}
		for more := true; more; {
			select {
			case d := <-st.asides:
				st.nackAside(d)
			default:
				more = false
			}
		}
	}
}

// setAside dead-letters d (a message delivered retry.maxDeliveries times, or one its
// consumer could not decode, as stored), then acknowledges it; it reports false when
// the publication failed and d went back for redelivery after its backoff. d is never
// acknowledged unpublished.
func (st *stream) setAside(ctx context.Context, d *Delivery) bool {
	if !st.deadLetter(ctx, d) {
		st.nackAside(d)
		return false
	}
	st.mu.Lock()
	delete(st.retrying, d.ID) // acknowledged: it will not come back to be forgotten
	if d.Undecodable != nil {
		delete(st.setAsideFails, d.ID)
	}
	st.mu.Unlock()
	return true
}

// nackAside nacks d, which could not be dead-lettered now, with the backoff of its
// deliveries so far; an undecodable message also counts its failed dead-letterings,
// since the broker counts no redeliveries on exclusive and failover subscriptions.
func (st *stream) nackAside(d *Delivery) {
	n := d.Redeliveries
	if d.Undecodable != nil {
		st.mu.Lock()
		fails := st.setAsideFails[d.ID]
		switch {
		case st.setAsideFails == nil:
			st.setAsideFails = map[string]uint32{d.ID: 1}
		case fails > 0 || len(st.setAsideFails) < maxSetAsideFails:
			st.setAsideFails[d.ID] = fails + 1
		}
		st.mu.Unlock()
		n = max(n, fails)
	}
	st.sub.Nack(d, st.def.Retry.Delay(n, rand.Float64()))
}

// maxSetAsideFails bounds the ids whose failed dead-letterings a stream counts; beyond,
// a message's backoff is the broker's redelivery count alone.
const maxSetAsideFails = 1024

// deadLetterTopic is retry.deadLetterTopic, or Pulsar's convention
// <topic>-<subscription>-DLQ (the topic without its partition suffix).
func (st *stream) deadLetterTopic(d *Delivery) string {
	if t := st.def.Retry.DeadLetterTopic; t != "" {
		return t
	}
	topic := d.Topic
	if i := strings.LastIndex(topic, "-partition-"); i > 0 {
		if _, err := strconv.Atoi(topic[i+len("-partition-"):]); err == nil {
			topic = topic[:i]
		}
	}
	return topic + "-" + st.opts.subscription + "-DLQ"
}

// envelope is the JSON form of a record (envelope=json).
type envelope struct {
	MessageID       string            `json:"messageId"`
	Topic           string            `json:"topic"`
	Key             string            `json:"key,omitempty"`
	OrderingKey     string            `json:"orderingKey,omitempty"` // base64 (it is bytes)
	Properties      map[string]string `json:"properties,omitempty"`
	PublishTime     string            `json:"publishTime"`
	EventTime       string            `json:"eventTime,omitempty"`
	RedeliveryCount uint32            `json:"redeliveryCount"`
	// Encrypted and Encryption: a message delivered still encrypted (cryptoFailure: deliver).
	Encrypted     bool            `json:"encrypted,omitempty"`
	Encryption    *Encryption     `json:"encryption,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`       // when the payload is JSON
	PayloadBase64 string          `json:"payloadBase64,omitempty"` // otherwise
}

// convert replaces d's payload by its conversion to the stream's record type.
func (st *stream) convert(ctx context.Context, d *Delivery) error {
	payload := d.Payload
	if d.Body != nil {
		b, err := io.ReadAll(d.Body)
		if err != nil {
			return fmt.Errorf("message %s: reading its body: %w", d.ID, err)
		}
		// Held whole from here on, so a dead-lettering still has it.
		payload, d.Payload, d.Body, d.Size = b, b, nil, 0
	}
	out, err := st.conv.Convert(ctx, d, payload, st.storedType, st.recordType)
	if err != nil {
		return fmt.Errorf("message %s of %s as %s: %w", d.ID, d.Topic, st.recordType, err)
	}
	d.Payload, d.Body, d.Size = out, nil, 0
	return nil
}

// flushBytes is what a stream writes between flushes (and acknowledgements) at most,
// besides one record written through.
const flushBytes = 64 << 10

// writeThrough is the payload size from which a record is written to the connection
// directly instead of being copied into the stream's buffer.
const writeThrough = 32 << 10

// appendRecord appends d's record to buf. A large record (and every streamed Body) is
// written through instead: buf first, then the record, straight to the connection; it
// returns buf emptied, and a write error is kept in st.writeErr.
func (st *stream) appendRecord(buf []byte, d *Delivery) []byte {
	if d.Body == nil && len(d.Payload) < writeThrough {
		return st.appendSmall(buf, d)
	}
	if st.writeErr != nil {
		return buf[:0]
	}
	w := deadlineWriter{st}
	if _, err := w.Write(buf); err != nil {
		st.writeErr = err
		return buf[:0]
	}
	buf = buf[:0]
	body := d.Body
	if body == nil {
		body = bytes.NewReader(d.Payload)
	}
	var head []byte
	size := d.Len()
	var tail string
	if st.opts.envelope == "json" {
		// The payload is not looked at as a whole, so it goes as payloadBase64 (whose
		// length is known before it is written) even when it is JSON.
		b, _ := json.Marshal(st.envelope(d))
		head = append(b[:len(b)-1:len(b)-1], `,"payloadBase64":"`...)
		tail = `"}`
		size = int64(len(head)) + int64(base64.StdEncoding.EncodedLen(int(size))) + int64(len(tail))
	}
	var hdr [24]byte
	n, err := w.Write(append(strconv.AppendInt(hdr[:0], size, 10), '\n'))
	if err == nil {
		_, err = w.Write(head)
	}
	if err == nil {
		var copied int64
		if st.opts.envelope == "json" {
			enc := base64.NewEncoder(base64.StdEncoding, w)
			copied, err = io.Copy(enc, body)
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		} else {
			copied, err = io.Copy(w, body)
		}
		if err == nil && copied != d.Len() {
			err = fmt.Errorf("message %s: its body gave %d of its %d bytes", d.ID, copied, d.Len())
		}
	}
	if err == nil {
		_, err = io.WriteString(w, tail)
	}
	if err != nil {
		// A record cut short cannot be finished: the stream ends here, and the message is
		// not acknowledged (it is redelivered).
		st.writeErr = err
		return buf
	}
	st.direct += int64(n) + size
	return buf
}

func (st *stream) envelope(d *Delivery) envelope {
	e := envelope{MessageID: d.ID, Topic: d.Topic, Key: d.Key, Properties: d.Properties,
		PublishTime: d.PublishTime.UTC().Format(time.RFC3339Nano), RedeliveryCount: d.Redeliveries,
		Encrypted: d.Encryption != nil, Encryption: d.Encryption}
	if !d.EventTime.IsZero() {
		e.EventTime = d.EventTime.UTC().Format(time.RFC3339Nano)
	}
	if len(d.OrderingKey) > 0 {
		e.OrderingKey = base64.StdEncoding.EncodeToString(d.OrderingKey)
	}
	return e
}

func (st *stream) appendSmall(buf []byte, d *Delivery) []byte {
	if st.opts.envelope != "json" {
		return recordio.AppendRecord(buf, d.Payload)
	}
	e := st.envelope(d)
	if d.Encryption == nil && json.Valid(d.Payload) {
		e.Payload = d.Payload
	} else {
		e.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
	}
	b, _ := json.Marshal(e)
	return recordio.AppendRecord(buf, b)
}

// deadlineWriter writes to the stream's connection, each write within WriteTimeout, so a
// large record may take as long as the client keeps taking its bytes.
type deadlineWriter struct{ st *stream }

func (w deadlineWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	_ = w.st.rc.SetWriteDeadline(time.Now().Add(w.st.limits.WriteTimeout))
	return w.st.c.Response().Write(p)
}

// failed records why the consumer ended the stream, for its Stream-Error trailer.
func (st *stream) failed(err error) {
	st.c.Response().Header().Set(trailerStreamError, err.Error())
	st.srv.log.WarnContext(st.ctx, "egress stream ended: the consumer failed", "stream", st.def.Name, "streamId", st.id, "error", err.Error())
}

// trailerStreamError is the trailer that says why a stream ended early; a stream that
// ends without it ended cleanly (the topic was terminated and drained) or was cut.
const trailerStreamError = "Stream-Error"

// HandleAck serves POST <stream path>/ack and <stream path>/nack: the message ids to
// acknowledge, or to have delivered again after their backoff, as RecordIO records or a
// JSON array, for the stream named by the Stream-Id header.
func (s *Server) HandleAck(c echo.Context) error {
	req := c.Request()
	st := s.state.Load()
	if st == nil {
		return httpreply.Error(c, http.StatusServiceUnavailable, "no configuration loaded yet", 1)
	}
	if err := admission.Authenticate(st.auth, req.Header); err != nil {
		return deny(c, err)
	}
	def, isAck, ok := st.table.LookupStream(req.URL.Path)
	if !ok || !isAck {
		return httpreply.Error(c, http.StatusNotFound, "no acknowledgement endpoint at "+strconv.Quote(req.URL.Path), 0)
	}
	if err := admission.Authorize(st.auth, req.Header, admission.Read, def.Name); err != nil {
		return deny(c, err)
	}
	sid := req.Header.Get("Stream-Id")
	if sid == "" {
		return httpreply.Error(c, http.StatusBadRequest, "send the Stream-Id header of the stream whose messages these are", 0)
	}
	s.mu.Lock()
	sm := s.open[sid]
	s.mu.Unlock()
	if sm == nil {
		return httpreply.Error(c, http.StatusConflict, notOpenHere(def.Name, sid), 0)
	}
	if sm.def.Name != def.Name {
		return httpreply.Error(c, http.StatusNotFound, fmt.Sprintf("no open stream %s with Stream-Id %s", def.Name, sid), 0)
	}
	if sm.opts.ack != "client" {
		return httpreply.Error(c, http.StatusConflict, fmt.Sprintf("stream %s acknowledges by itself (ack=auto)", def.Name), 0)
	}
	// The body is read within ackBodyTimeout; the deadline is lifted right after, or it
	// would cut net/http's background read under a long dead-lettering (see httpreply.DropBody).
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Now().Add(ackBodyTimeout))
	refs, err := readIDs(req)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.Response().Header().Set("Connection", "close")
		return c.JSON(http.StatusRequestTimeout, map[string]any{"status": http.StatusRequestTimeout,
			"error": fmt.Sprintf("the body did not arrive within %s; nothing was acknowledged", ackBodyTimeout)})
	}
	_ = rc.SetReadDeadline(time.Time{})
	if errors.Is(err, errTooManyIDs) {
		return httpreply.Error(c, http.StatusRequestEntityTooLarge, err.Error(), 0)
	}
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	httpreply.SettleBody(c, false) // anything after the ids: the answer does not wait for it
	throughN, err := ackQuery(req.URL.RawQuery)
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	ids, through, err := sm.resolve(refs, throughN)
	if err != nil {
		return httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	if strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/nack") {
		return sm.nack(c, ids)
	}
	if through {
		return sm.ackThrough(c, ids)
	}
	var unknown []string
	acked := 0
	for i, id := range ids {
		e := sm.take(id, &unknown)
		if e == nil {
			continue
		}
		if err := sm.sub.Ack(e.d); err != nil {
			// The id stays unacknowledged (its ack timeout still runs), so the client can
			// post it again; it learns which ids were acknowledged and which were not.
			sm.putBack([]*unackedEntry{e})
			c.Response().Header().Set("Retry-After", "1")
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "acked": acked, "failed": id,
				"notAcked": ids[i:], "unknown": unknown,
				"error": fmt.Sprintf("acknowledging %s: %v; post the ids in notAcked again", id, err)})
		}
		s.obs.Acked(def.Name, 1, time.Since(e.at))
		acked++
	}
	sm.wake()
	if len(unknown) > 0 {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "acked": acked, "unknown": unknown,
			"error": fmt.Sprintf("%d ids or positions were not delivered on this stream, were acknowledged already, or timed out and were redelivered; "+
				"a message another stream delivered (on this or another bridge process) is acknowledged once this stream has delivered it again", len(unknown))})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "acked": acked})
}

// notOpenHere is the answer to an acknowledgement or lookup for a Stream-Id this process
// has no open stream for (409): it ended, or another bridge process serves it. Nothing is
// acknowledged; the messages it delivered without an acknowledgement go back to the
// subscription when its consumer closes (or at their ackTimeout), so the client reads
// them again from a stream and acknowledges them there.
func notOpenHere(stream, sid string) string {
	return fmt.Sprintf("no stream %s with Stream-Id %s is open on this bridge process: it ended, or another process serves it; "+
		"nothing was acknowledged. Its unacknowledged messages are delivered again to the subscription: read them from a stream "+
		"and acknowledge them with that stream's Stream-Id", stream, sid)
}

func (st *stream) wake() {
	select {
	case st.ackWake <- struct{}{}:
	default:
	}
}

// resolve turns what a client posted into message ids: a ref of decimal digits is a
// record's position in the response (an id always has colons), anything else an id. A
// position not awaiting an acknowledgement stays as it is (and is reported unknown).
// ackQuery reads an /ack or /nack query as strictly as a GET's: through (at most once) is
// its only parameter; a malformed query, a repeated or an unknown parameter is an error
// naming it, so a typo never acknowledges something other than what the client meant.
func ackQuery(raw string) (through string, err error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", fmt.Errorf("the query %.64q is malformed: %v", raw, err)
	}
	for k, v := range q {
		if k != "through" {
			return "", fmt.Errorf("unknown query parameter %.64q (known: through)", k)
		}
		if len(v) > 1 {
			return "", fmt.Errorf("query parameter %q given %d times", k, len(v))
		}
	}
	return q.Get("through"), nil
}

// through=N (no body) names every record awaiting its acknowledgement up to position N.
func (st *stream) resolve(refs []string, through string) (ids []string, cumulative bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if through != "" {
		n, err := strconv.ParseInt(through, 10, 64)
		if err != nil || n < 0 {
			return nil, false, fmt.Errorf("through=%q is not a record position (0, 1, 2, ...)", through)
		}
		if len(refs) > 0 {
			return nil, false, errors.New("send either through=N or a body of ids and positions, not both")
		}
		es := make([]*unackedEntry, 0, len(st.unacked))
		for _, e := range st.unacked {
			if e.pos <= n {
				es = append(es, e)
			}
		}
		sort.Slice(es, func(i, j int) bool { return es[i].pos < es[j].pos })
		for _, e := range es {
			ids = append(ids, e.d.ID)
		}
		return ids, true, nil
	}
	ids = make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r
		if pos, err := strconv.ParseInt(r, 10, 64); err == nil && pos >= 0 {
			if id, ok := st.byPos[pos]; ok {
				ids[i] = id
			}
		}
	}
	return ids, false, nil
}

// CumulativeAcker is what a Subscription implements to acknowledge cumulatively on the
// broker: last and everything before it on its partition; covered (last among them) are
// the deliveries that acknowledgement settles.
type CumulativeAcker interface {
	AckCumulative(last *Delivery, covered []*Delivery) error
}

// ackThrough acknowledges the records up to a position: per partition, with one
// cumulative acknowledgement where the subscription type allows it (Exclusive, Failover)
// and it acknowledges nothing the client has not (no earlier message of the partition
// awaits its acknowledgement or a redelivery), individually otherwise.
func (sm *stream) ackThrough(c echo.Context, ids []string) error {
	sm.mu.Lock()
	var order []string
	groups := map[string][]*unackedEntry{}
	for _, id := range ids {
		if e := sm.takeLocked(id); e != nil {
			if groups[e.d.Topic] == nil {
				order = append(order, e.d.Topic)
			}
			groups[e.d.Topic] = append(groups[e.d.Topic], e)
		}
	}
	ca, canCumulate := sm.sub.(CumulativeAcker)
	canCumulate = canCumulate && (sm.def.Type == "exclusive" || sm.def.Type == "failover")
	cumulate := map[string]*unackedEntry{} // topic -> the entry with the highest id
	for topic, es := range groups {
		if !canCumulate {
			break
		}
		last := es[0]
		for _, e := range es[1:] {
			if idLess(last.d.ID, e.d.ID) {
				last = e
			}
		}
		ok := true
		for id, t := range sm.retrying {
			ok = ok && !(t == topic && idLess(id, last.d.ID))
		}
		for id, e := range sm.unacked {
			ok = ok && !(e.d.Topic == topic && idLess(id, last.d.ID))
		}
		if ok {
			cumulate[topic] = last
		}
	}
	sm.mu.Unlock()
	acked, cumulative := 0, 0
	for gi, topic := range order {
		es := groups[topic]
		var err error
		if last := cumulate[topic]; last != nil {
			ds := make([]*Delivery, len(es))
			for i, e := range es {
				ds[i] = e.d
			}
			if err = ca.AckCumulative(last.d, ds); err == nil {
				cumulative++
			}
		} else {
			for i, e := range es {
				if err = sm.sub.Ack(e.d); err != nil {
					es = es[i:]
					break
				}
				sm.srv.obs.Acked(sm.def.Name, 1, time.Since(e.at))
				acked++
			}
		}
		if err != nil {
			left := append([]*unackedEntry(nil), es...)
			for _, t := range order[gi+1:] {
				left = append(left, groups[t]...)
			}
			sm.putBack(left)
			c.Response().Header().Set("Retry-After", "1")
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "acked": acked,
				"error": fmt.Sprintf("acknowledging on %s: %v; %d records stay unacknowledged: post through=N again", topic, err, len(left))})
		}
		if cumulate[topic] != nil {
			for _, e := range es {
				sm.srv.obs.Acked(sm.def.Name, 1, time.Since(e.at))
			}
			acked += len(es)
		}
	}
	sm.wake()
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "acked": acked, "cumulative": cumulative})
}

// idLess orders message ids (ledger:entry:partition:batchIndex) of one partition.
func idLess(a, b string) bool {
	pa, pb := strings.Split(a, ":"), strings.Split(b, ":")
	if len(pa) != 4 || len(pb) != 4 {
		return a < b
	}
	for _, i := range []int{0, 1, 3} {
		x, _ := strconv.ParseInt(pa[i], 10, 64)
		y, _ := strconv.ParseInt(pb[i], 10, 64)
		if x != y {
			return x < y
		}
	}
	return false
}

// nack sends the messages back for redelivery, each after its backoff.
func (sm *stream) nack(c echo.Context, ids []string) error {
	var unknown []string
	nacked, dead := 0, 0
	for _, id := range ids {
		e := sm.take(id, &unknown)
		if e == nil {
			continue
		}
		if sm.retry(c.Request().Context(), e.d, "nack", true) {
			dead++
		}
		nacked++
	}
	select {
	case sm.ackWake <- struct{}{}:
	default:
	}
	if len(unknown) > 0 {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "nacked": nacked, "deadLettered": dead, "unknown": unknown,
			"error": fmt.Sprintf("%d ids were not delivered on this stream, were acknowledged already, or timed out and were redelivered", len(unknown))})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "nacked": nacked, "deadLettered": dead})
}

// maxAckIDs bounds the ids and positions one /ack or /nack request may name: each costs
// memory while the request is served (and again in the answer's "unknown" list), so a
// body of millions of tiny records cannot take the process's memory.
const maxAckIDs = 10000

// maxAckBody bounds an /ack or /nack body: room for maxAckIDs of the longest ids
// (ledger:entry:partition:batch, 61 characters) with their framing, so one JSON string
// cannot make the decoder hold megabytes.
const maxAckBody = 1 << 20

// ackBodyTimeout bounds the read of an /ack or /nack body (at most maxAckBody): a client
// that stops sending it is answered 408 and its connection closed.
var ackBodyTimeout = 30 * time.Second

// errTooManyIDs: a request named more than maxAckIDs ids, or its body is over maxAckBody (413).
var errTooManyIDs = fmt.Errorf("more than %d ids or positions, or more than %d bytes, in one request: post them in several", maxAckIDs, maxAckBody)

// capped reads at most n bytes and then fails with errTooManyIDs (instead of an early
// io.EOF, which would make a long body look like a malformed one).
type capped struct {
	r io.Reader
	n int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n <= 0 {
		var one [1]byte
		if n, _ := io.ReadFull(c.r, one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, errTooManyIDs
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// readIDs reads message ids from a RecordIO body (one id per record) or a JSON array,
// at most maxAckIDs of them (errTooManyIDs beyond).
func readIDs(req *http.Request) ([]string, error) {
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	body := &capped{r: req.Body, n: maxAckBody}
	switch mt {
	case "":
		if req.ContentLength == 0 {
			return nil, nil // through=N needs no body
		}
	case recordio.MediaRecordIO:
		var ids []string
		rd := recordio.NewReader(body, recordio.MaxRecordSize(256))
		for {
			b, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return ids, nil
			}
			if errors.Is(err, errTooManyIDs) {
				return nil, errTooManyIDs
			}
			if err != nil {
				return nil, err
			}
			if len(ids) == maxAckIDs {
				return nil, errTooManyIDs
			}
			ids = append(ids, string(b))
		}
	case recordio.MediaJSON:
		const notArray = "the body is not a JSON array of message ids and record positions"
		dec := json.NewDecoder(body)
		if tok, err := dec.Token(); errors.Is(err, errTooManyIDs) {
			return nil, errTooManyIDs
		} else if err != nil || tok != json.Delim('[') {
			return nil, notArrayErr(notArray, err, tok)
		}
		var ids []string
		for i := 0; dec.More(); i++ {
			if i == maxAckIDs {
				return nil, errTooManyIDs
			}
			var r json.RawMessage
			if err := dec.Decode(&r); errors.Is(err, errTooManyIDs) {
				return nil, errTooManyIDs
			} else if err != nil {
				return nil, notArrayErr(notArray, err, nil)
			}
			var id string
			var pos uint64
			if err := json.Unmarshal(r, &id); err != nil {
				if err := json.Unmarshal(r, &pos); err != nil {
					return nil, fmt.Errorf("element %d, %.64s, is neither a message id (a string) nor a record position (0, 1, 2, ...)", i, r)
				}
				id = strconv.FormatUint(pos, 10)
			}
			ids = append(ids, id)
		}
		if tok, err := dec.Token(); errors.Is(err, errTooManyIDs) {
			return nil, errTooManyIDs
		} else if err != nil || tok != json.Delim(']') {
			return nil, notArrayErr(notArray, err, tok)
		}
		return ids, nil
	}
	return nil, fmt.Errorf("Content-Type %q: send application/recordio (one id per record) or application/json (an array)", req.Header.Get("Content-Type"))
}

// notArrayErr says why the body is not a JSON array of ids: the decoder's error
// (wrapped, so a read deadline shows through) or what stood where a bracket should have.
func notArrayErr(msg string, err error, tok json.Token) error {
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%s: found %v", msg, tok)
}
