package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// maxListedFailures bounds the failures a one-answer response lists.
const maxListedFailures = 100

// stream is one ingress request: the handler goroutine reads and publishes records, a
// collector goroutine settles them in input order and writes the receipts.
type stream struct {
	// Set by newStream, read-only after it (by the reader, the collector and the handler).
	srv        *Server
	c          echo.Context
	rc         *http.ResponseController
	route      string
	req        *mapping.Request
	limits     Limits
	streaming  bool                // receipts are streamed; otherwise one answer at the end
	recordio   bool                // the body is a RecordIO stream; otherwise one record
	streamSpan trace.SpanContext   // the POST span
	segments   *telemetry.Segments // of a RecordIO stream, with tracing on
	named      *namedStream        // Stream-Name; nil for an unnamed stream

	ctx    context.Context // ends when the stream is abandoned or the client goes away
	cancel context.CancelFunc

	// Shared by the goroutines, each under its own lock or atomic.
	pending     chan *entry    // records awaiting their outcome, in input order
	budget      *budget.Budget // ingress.pendingBytes: the bytes awaiting receipts (a record larger than it is admitted alone)
	bodyMu      sync.Mutex
	stopErr     error // why reading stopped early (drain), set under bodyMu
	abandonC    chan struct{}
	abandonO    sync.Once
	wdMu        sync.Mutex
	cutAt       time.Time // set by abandon: no write of this stream waits past it
	unavailable atomic.Bool
	abandoned   atomic.Bool
	sawEOF      atomic.Bool // the request body was read to its end

	// The reader's and the collector's own fields, each written per record, are kept on
	// cache lines apart (the gaps): on lines they shared, each side's writes made the
	// other's next access to its own fields miss, so every record cost both a transfer
	// of the line between cores.
	_ [64]byte

	// Written by the reader, read by the handler after the reader is done.
	accepted   int64             // records with an entry: published + failed, once settled
	msg        Message           // reused for every record (the publisher does not keep it)
	traceProps map[string]string // reused for records whose route sets no properties
	traceBuf   []byte            // a record's traceparent, reused (the publisher copies it)
	lastRead   time.Time         // when the last read of the body returned: the read stage's start

	_ [64]byte

	// Written by the collector, read by the handler after the collector is done.
	published, failed int64
	firstID, lastID   string
	failures          []failure
	omitted           int64
	firstFailure      *failure
	writeErr          error
	tallies           []tally // by status, flushed to the Observer
	idle              bool    // the collector waited before the record it settles
	duplicates        int64   // named: records the broker already had (counted in published)
	resume            *int64  // named: the sequence number of the first record to resend
	segPublished      int64   // settled records not yet counted into the segments (flushSettled)
	segFailed         int64
	clock             telemetry.Clock // the time records' spans end at, read once per run settled together
	staged            []stageSample   // sampled records settled since the last write, for PublishStage

	_ [64]byte // nor with whatever the allocator puts after the stream
}

type failure struct {
	Seq      int64  `json:"seq"`
	Sequence *int64 `json:"sequence,omitempty"` // a named stream's record
	Status   int    `json:"status"`
	Error    string `json:"error"`
}

// entry is one record between its publication and its receipt.
type entry struct {
	seq      int64
	size     int64 // the record's payload bytes
	charge   int64 // what it holds of ingress.pendingBytes: payload, key and properties
	start    time.Time
	read     time.Time // the body read that completed it returned (the read stage)
	answered time.Time // the publisher's callback ran (the end of the send stage)
	done     chan struct{}
	id       string
	topic    string
	err      error
	complete func(id string, err error) // e.settle, made once per pooled entry
	span     telemetry.RecordSpan       // the record's publish span (zero with tracing off)
	sequence int64                      // a named stream's sequence number, else -1
	dup      bool                       // named: the broker already had it
}

var entryPool = sync.Pool{New: func() any {
	e := &entry{done: make(chan struct{}, 1)}
	e.complete = func(id string, err error) {
		e.id, e.err, e.answered = id, err, time.Now()
		e.done <- struct{}{}
	}
	return e
}}

// tally aggregates settled records for the Observer between flushes.
type tally struct {
	status   int
	n, bytes int64
}

func newStream(s *Server, c echo.Context, parent context.Context, route string, req *mapping.Request, l Limits, streaming, rio bool) *stream {
	ctx, cancel := context.WithCancel(parent)
	st := &stream{srv: s, c: c, rc: http.NewResponseController(c.Response()), route: route, req: req, limits: l,
		streaming: streaming, recordio: rio, ctx: ctx, cancel: cancel,
		pending: make(chan *entry, l.PendingRecords), abandonC: make(chan struct{})}
	st.budget = budget.New(l.PendingBytes)
	if s.tr.Enabled {
		st.streamSpan = trace.SpanContextFromContext(ctx)
		if rio {
			st.segments = s.tr.NewSegments("POST "+route, st.streamSpan)
		}
	}
	return st
}

// stopReading makes the body reader fail with err from its next read on. A read in
// progress is given stopGrace to finish: a client that is sending completes it (and the
// body stays readable, so lingerForTheClient can drain it cleanly), a silent one times out.
//
// A body already read to its end gets no deadline: net/http then reads the connection in
// the background (to notice a client that goes away), and a deadline would fail that
// read and cancel the connection's context, so the next request a kept-alive client
// sends on it would start cancelled (see bodyReader.Read for the race with a read that
// is ending).
func (st *stream) stopReading(err error) {
	st.bodyMu.Lock()
	defer st.bodyMu.Unlock()
	if st.stopErr == nil {
		st.stopErr = err
		if !st.sawEOF.Load() {
			_ = st.rc.SetReadDeadline(time.Now().Add(stopGrace))
		}
	}
}

const stopGrace = 100 * time.Millisecond

// abandon stops waiting for outstanding receipts (the drain timeout is near); writes
// to the client, including one in progress, fail from cut on, so a client that stopped
// reading its receipts cannot hold the drain past its deadline.
func (st *stream) abandon(cut time.Time) {
	st.wdMu.Lock()
	if st.cutAt.IsZero() || cut.Before(st.cutAt) {
		st.cutAt = cut
		_ = st.rc.SetWriteDeadline(cut)
	}
	st.wdMu.Unlock()
	st.abandonO.Do(func() {
		st.abandoned.Store(true)
		close(st.abandonC)
	})
	st.stopReading(errDraining)
	st.cancel()
}

// setWriteDeadline bounds the next write to the client: one that takes nothing for the
// idle timeout is gone (its receipts cannot be delivered), and after abandon nothing
// waits past the drain's cut.
func (st *stream) setWriteDeadline() {
	st.wdMu.Lock()
	defer st.wdMu.Unlock()
	d := time.Now().Add(st.limits.IdleTimeout)
	if !st.cutAt.IsZero() && st.cutAt.Before(d) {
		d = st.cutAt
	}
	_ = st.rc.SetWriteDeadline(d)
}

// run serves the stream and returns the status it ended with.
func (st *stream) run() int {
	defer st.cancel()
	res := st.c.Response()
	if st.streaming {
		// HTTP/1.1 needs full duplex to write receipts while the body is still coming;
		// HTTP/2 always is (EnableFullDuplex then reports it is not needed).
		_ = st.rc.EnableFullDuplex()
		h := res.Header()
		h.Set("Content-Type", recordio.MediaRecordIO)
		h.Set("Message-Content-Type", recordio.MediaJSON)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		res.WriteHeader(http.StatusOK)
		st.setWriteDeadline()
		if err := st.rc.Flush(); err != nil {
			st.writeErr = err
		}
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		st.collect()
	}()
	endErr := st.readAll()
	records := st.accepted
	close(st.pending)
	<-collected
	st.segments.Close()

	status, msg, retry := st.outcome(endErr)
	sum := summary{Summary: true, Records: records, Published: st.published, Failed: st.failed, Status: status, Error: msg}
	if st.named != nil {
		sum.Duplicates = &st.duplicates
		if st.resume == nil {
			if n, ok := st.named.sequenceOf(records); ok {
				st.resume = &n // every record was answered: the next one
			}
		}
		sum.ResumeSequence = st.resume
	}
	if re := (*recordio.Error)(nil); errors.As(endErr, &re) && isFraming(re.Err) {
		off := re.Offset
		sum.Offset = &off
	}
	if retry > 0 {
		sum.RetryAfter = retry
	}
	if st.streaming {
		if st.writeErr == nil {
			b := recordio.AppendRecord(nil, mustJSON(sum))
			st.setWriteDeadline()
			if _, err := res.Write(b); err == nil {
				_ = st.rc.Flush()
			}
			if stoppedEarly(endErr) {
				st.lingerForTheClient()
			}
		}
	} else {
		ans := answer{summary: sum, Failures: st.failures, FailuresOmitted: st.omitted, FirstMessageID: st.firstID, LastMessageID: st.lastID}
		if retry > 0 {
			res.Header().Set("Retry-After", strconv.Itoa(retry))
		}
		httpreply.SettleBody(st.c, st.sawEOF.Load())
		_ = st.c.JSON(status, ans)
	}
	level := slog.LevelDebug
	if status != http.StatusOK {
		level = slog.LevelInfo
	}
	st.srv.log.Log(st.ctx, level, "ingress stream ended", "route", st.route, "records", records, "published", st.published, "failed", st.failed, "status", status, "error", msg)
	return status
}

// stoppedEarly reports whether reading stopped while the client may still be sending.
func stoppedEarly(endErr error) bool {
	return errors.Is(endErr, errDraining) || errors.Is(endErr, errUnavailable) || errors.Is(endErr, errTakenOver) || isFramingError(endErr)
}

// lingerForTheClient reads and drops what the client still sends, for up to a second or
// until it ends its body, so it can read the summary before the connection closes.
// Closing a socket with unread input makes the kernel reset it, and a reset can destroy
// the summary in flight; a client that sees its body rejected may also drop the
// connection. A client that reads the summary and ends its body lets this return at once.
//
// A body read to its end already has nothing to drop, and a deadline would cut net/http's
// background read (see stopReading).
func (st *stream) lingerForTheClient() {
	if st.sawEOF.Load() {
		return
	}
	_ = st.rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, st.c.Request().Body, lingerBytes)
}

const (
	lingerTime  = time.Second
	lingerBytes = 64 << 20
)

type summary struct {
	Summary    bool   `json:"summary"`
	Records    int64  `json:"records"`
	Published  int64  `json:"published"`
	Failed     int64  `json:"failed"`
	Status     int    `json:"status"`
	Error      string `json:"error,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	RetryAfter int    `json:"retryAfter,omitempty"`
	// Named streams: records the broker already had, and the sequence number to send
	// next: the first record that failed for now, else the one after the last record.
	Duplicates     *int64 `json:"duplicates,omitempty"`
	ResumeSequence *int64 `json:"resumeSequence,omitempty"`
}

type answer struct {
	summary
	Failures        []failure `json:"failures,omitempty"`
	FailuresOmitted int64     `json:"failuresOmitted,omitempty"`
	FirstMessageID  string    `json:"firstMessageId,omitempty"`
	LastMessageID   string    `json:"lastMessageId,omitempty"`
}

// outcome chooses the stream's final status: what ended it early, else the first
// record that failed, else 200.
func (st *stream) outcome(endErr error) (status int, msg string, retryAfter int) {
	switch {
	case endErr == nil || errors.Is(endErr, errUnavailable) || errors.Is(endErr, errTakenOver):
		// reported through the failed record below
	case st.abandoned.Load():
		return endStatus(errDraining)
	default:
		if isFramingError(endErr) {
			st.srv.obs.DecodeError(st.route)
		}
		return endStatus(endErr)
	}
	if f := st.firstFailure; f != nil {
		if st.unavailable.Load() {
			return http.StatusServiceUnavailable, fmt.Sprintf("record %d: %s", f.Seq, f.Error), 5
		}
		return f.Status, fmt.Sprintf("record %d: %s", f.Seq, f.Error), 0
	}
	return http.StatusOK, "", 0
}

// endStatus is the status a stream ends with when reading its body failed with err
// (not nil, not errUnavailable).
func endStatus(err error) (status int, msg string, retryAfter int) {
	switch {
	case errors.Is(err, errDraining):
		return http.StatusServiceUnavailable, err.Error() + "; send the records after the last receipt again", 5
	case errors.Is(err, errIdle):
		return http.StatusRequestTimeout, err.Error(), 0
	case errors.Is(err, context.Canceled):
		return 499, "the client went away", 0
	case isFramingError(err):
		return http.StatusBadRequest, err.Error(), 0
	}
	return http.StatusBadRequest, "reading the request body: " + err.Error(), 0
}

// recordBody is a streamed record's body on its way to the publisher; it keeps the
// body's own error, so a record the client did not send whole is told apart from one the
// broker refused.
type recordBody struct {
	r   io.Reader
	err error
}

func (b *recordBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

var (
	errIdle        = errors.New("the request body was idle too long")
	errUnavailable = errors.New("stopped reading: the broker is unavailable")
	errTakenOver   = errors.New("stopped reading: the named stream was taken over by another request")
)

func isFraming(err error) bool {
	return errors.Is(err, recordio.ErrBadHeader) || errors.Is(err, recordio.ErrRecordTooLarge) || errors.Is(err, recordio.ErrTruncated)
}

func isFramingError(err error) bool {
	var re *recordio.Error
	return errors.As(err, &re) && isFraming(re.Err)
}

// readAll reads and publishes records until the body ends or the stream must stop.
func (st *stream) readAll() error {
	body := &bodyReader{st: st, r: st.c.Request().Body}
	if !st.recordio {
		return st.readOne(body)
	}
	bufMax := st.limits.BufferRecordBytes
	if bufMax > st.limits.MaxRecordBytes {
		bufMax = st.limits.MaxRecordBytes
	}
	rd := recordio.NewReader(body, recordio.MaxRecordSize(int(bufMax)), recordio.StreamLargerRecords(1<<62), recordio.BufferSize(64<<10))
	for {
		rec, err := rd.NextRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := st.publish(rec); err != nil {
			return err
		}
	}
}

// readOne reads a non-streaming request: the body is one record.
func (st *stream) readOne(body io.Reader) error {
	n := st.c.Request().ContentLength
	if n > st.limits.MaxRecordBytes {
		return st.publishFailed(0, http.StatusRequestEntityTooLarge, fmt.Errorf("record of %d bytes exceeds ingress.maxRecordBytes (%d)", n, st.limits.MaxRecordBytes))
	}
	if n > st.limits.BufferRecordBytes {
		return st.publish(recordio.Record{Body: io.LimitReader(body, n), Size: n})
	}
	data, err := io.ReadAll(io.LimitReader(body, st.limits.BufferRecordBytes+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > st.limits.BufferRecordBytes {
		return st.publishFailed(0, http.StatusRequestEntityTooLarge,
			fmt.Errorf("a single record without Content-Length may be at most ingress.bufferRecordBytes (%d); send its length or use RecordIO", st.limits.BufferRecordBytes))
	}
	return st.publish(recordio.Record{Data: data, Size: int64(len(data))})
}

// publish routes and publishes one record. It returns an error only when the stream
// must stop reading.
func (st *stream) publish(rec recordio.Record) error {
	cur := st.srv.state.Load()
	if rec.Size > cur.limits.MaxRecordBytes {
		return st.publishFailed(rec.Index, http.StatusRequestEntityTooLarge,
			fmt.Errorf("record of %d bytes exceeds ingress.maxRecordBytes (%d)", rec.Size, cur.limits.MaxRecordBytes))
	}
	route, ok := cur.table.Route(st.route)
	if !ok {
		return st.publishFailed(rec.Index, http.StatusNotFound, fmt.Errorf("route %s was removed by a configuration reload", st.route))
	}
	tg, err := route.Resolve(st.req, rec.Data)
	if err != nil {
		return st.publishFailed(rec.Index, http.StatusUnprocessableEntity, err)
	}
	sequence := int64(-1)
	if st.named != nil {
		n, ok := st.named.sequenceOf(rec.Index)
		if !ok {
			return st.publishFailed(rec.Index, http.StatusBadRequest, fmt.Errorf("the record's sequence number would pass %d: sequence numbers must increase", int64(1<<63-1)))
		}
		sequence = n
	}
	m := &st.msg // PublishAsync does not keep it
	*m = Message{Topic: tg.Topic, Key: tg.Key, Properties: tg.Properties, Schema: tg.Schema}
	if st.named != nil {
		m.Producer, m.Sequence = st.named.producer, sequence
	}
	// The record holds its key and properties too until its receipt (ingress.pendingBytes).
	charge := rec.Size + m.MetadataBytes()
	if err := st.budget.Acquire(st.ctx, charge); err != nil { // abandon ends st.ctx
		return err
	}
	// The record's segment is taken before the entry is written: its lock is then the
	// first atomic after the budget's, with nothing to wait for. Taken after, it waited
	// for the entry's stores to reach memory last written by the other core (a pooled
	// entry was settled there), a wait the handover to the collector below pays anyway.
	link := st.segments.Next(rec.Size)
	e := entryPool.Get().(*entry)
	e.seq, e.size, e.charge, e.start, e.topic, e.id, e.err = rec.Index, rec.Size, charge, time.Now(), tg.Topic, "", nil
	e.read = st.lastRead
	e.sequence, e.dup = sequence, false
	if tr := st.srv.tr; tr.Enabled {
		// Each record is sampled on its own; a sampled record's message carries its
		// context, so consumers continue the trace (an unsampled one's only as
		// Propagates says).
		tr.StartPublish(&e.span, st.recordParent(m.Properties), link, tg.Topic, rec.Size, e.start)
		if e.span.Propagates(m.Properties) {
			// As a property given as bytes, in the stream's own buffer (the publisher
			// reads it before it returns): no map written, walked and encoded per
			// record. A context with a tracestate goes into the properties map.
			if tp, ok := e.span.AppendTraceparent(st.traceBuf[:0], m.Properties); ok {
				st.traceBuf = tp
				m.ExtraKey, m.ExtraValue = "traceparent", tp
			} else {
				if m.Properties == nil {
					if st.traceProps == nil {
						st.traceProps = make(map[string]string, 2)
					}
					m.Properties = st.traceProps // the publisher does not keep it; Inject overwrites it
				}
				e.span.Inject(m.Properties)
			}
		}
	}
	start := e.start
	select {
	case st.pending <- e:
		st.accepted++
	case <-st.ctx.Done():
		st.budget.Release(charge)
		st.srv.tr.EndRecord(&e.span, "", st.ctx.Err()) // never sent: a failed record
		return st.ctx.Err()
	}
	if rec.Body != nil {
		body := &recordBody{r: rec.Body}
		id, err := st.srv.pub.PublishStream(st.ctx, m, rec.Size, body)
		if body.err != nil {
			// The request body failed inside the record (it ended, went idle, or the
			// stream is draining): whatever the publisher made of the part it read, the
			// record is not in Pulsar whole. It fails with the status the body's error
			// ends the stream with, never as the broker's refusal, and the stream stops.
			status, _, _ := endStatus(body.err)
			e.complete("", &statusError{status: status, err: fmt.Errorf("the request body failed inside record %d: %w", rec.Index, body.err)})
			return body.err
		}
		e.complete(id, err)
	} else {
		m.Payload = rec.Data
		st.srv.pub.PublishAsync(st.ctx, m, e.complete)
		if rec.Index%8 == 0 {
			// Timed here, on the reader, from its own copy of the start: the entry
			// belongs to the collector once published (it may be settled already).
			st.srv.obs.PublishStage(st.route, "queue", time.Since(start))
		}
	}
	if st.unavailable.Load() {
		return errUnavailable
	}
	return nil
}

// recordParent is the context a record's publish span continues: a traceparent the
// route gives the record (a property mapped from the record or a request header), else,
// for a request whose body is one record, the request's own span. Records of a RecordIO
// stream without one are roots of their own traces, linked to the stream's segment.
func (st *stream) recordParent(props map[string]string) trace.SpanContext {
	if sc, ok := telemetry.ParseTraceparent(props); ok {
		return sc
	}
	if !st.recordio {
		return st.streamSpan
	}
	return trace.SpanContext{}
}

// publishFailed settles a record that was never sent.
func (st *stream) publishFailed(seq int64, status int, err error) error {
	e := entryPool.Get().(*entry)
	e.seq, e.size, e.charge, e.start, e.topic, e.id = seq, 0, 0, time.Now(), "", ""
	e.read, e.answered = time.Time{}, time.Time{}
	e.err = &statusError{status: status, err: err}
	e.sequence, e.dup = -1, false
	if st.named != nil {
		if n, ok := st.named.sequenceOf(seq); ok {
			e.sequence = n
		}
	}
	if tr := st.srv.tr; tr.Enabled {
		// Failed records are always traced (EndRecord records the span if it was not sampled).
		tr.StartPublish(&e.span, st.recordParent(nil), st.segments.Next(0), "", 0, e.start)
	}
	select {
	case st.pending <- e:
		st.accepted++
	case <-st.ctx.Done():
		st.srv.tr.EndRecord(&e.span, "", e.err)
		return st.ctx.Err()
	}
	e.done <- struct{}{}
	return nil
}

type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// statusOf maps a publish error to the status of its record.
func statusOf(err error) int {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, ErrTakenOver):
		return http.StatusConflict
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrRefused):
		return http.StatusBadGateway
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return 499
	}
	return http.StatusInternalServerError
}

// collect settles records in input order and writes their receipts, flushing whenever
// the next outcome is not ready yet.
func (st *stream) collect() {
	res := st.c.Response()
	var buf []byte
	flush := func() {
		st.clock.Stale() // it writes, or the collector waits next: the next span reads the clock again
		st.flushTallies()
		st.flushSettled()
		if len(buf) == 0 || st.writeErr != nil {
			buf, st.staged = buf[:0], st.staged[:0]
			return
		}
		st.setWriteDeadline()
		if _, err := res.Write(buf); err != nil {
			st.fail(err)
		} else if err := st.rc.Flush(); err != nil {
			st.fail(err)
		} else {
			st.observeStages(time.Now())
		}
		buf = buf[:0]
	}
	for {
		var e *entry
		var ok bool
		st.idle = false
		select {
		case e, ok = <-st.pending:
		default:
			flush()
			st.idle = true
			e, ok = <-st.pending
		}
		if !ok {
			flush()
			return
		}
		select {
		case <-e.done:
		default:
			flush()
			select {
			case <-e.done:
			case <-st.abandonC:
				// The drain timeout passed: the outcome is unknown. The publisher's
				// callback will still come; the entry is not reused.
				st.budget.Release(e.charge)
				st.settle(&entry{seq: e.seq, sequence: e.sequence, span: e.span, err: &statusError{status: http.StatusServiceUnavailable,
					err: errors.New("not confirmed by the broker before the drain timeout; outcome unknown")}}, &buf)
				continue
			}
		}
		st.budget.Release(e.charge)
		st.settle(e, &buf)
		entryPool.Put(e)
		if len(buf) >= 32<<10 {
			flush()
		}
	}
}

func (st *stream) fail(err error) {
	st.writeErr = err
	st.cancel()
}

// settle accounts one record and appends its receipt.
func (st *stream) settle(e *entry, buf *[]byte) {
	status := http.StatusOK
	if errors.Is(e.err, ErrDuplicate) {
		e.err, e.dup = nil, true
		st.duplicates++
	}
	if e.err != nil {
		status = statusOf(e.err)
		f := failure{Seq: e.seq, Status: status, Error: e.err.Error()}
		if e.sequence >= 0 {
			f.Sequence = &e.sequence
			if st.resume == nil && !refusedForGood(status) {
				n := e.sequence
				st.resume = &n
			}
		}
		st.failed++
		if st.firstFailure == nil {
			st.firstFailure = &f
		}
		if len(st.failures) < maxListedFailures {
			st.failures = append(st.failures, f)
		} else {
			st.omitted++
		}
		switch {
		case status == http.StatusServiceUnavailable:
			st.unavailable.Store(true)
			st.stopReading(errUnavailable)
		case errors.Is(e.err, ErrTakenOver):
			st.stopReading(errTakenOver)
		}
		if st.streaming {
			*buf = recordio.AppendRecord(*buf, mustJSON(f))
		}
	} else {
		st.published++
		if st.firstID == "" && !e.dup {
			st.firstID = e.id
		}
		if !e.dup {
			st.lastID = e.id
		}
		if st.streaming {
			*buf = appendReceipt(*buf, e)
		}
	}
	if st.srv.tr.Enabled {
		st.srv.tr.EndRecordAt(&e.span, e.id, e.err, &st.clock)
		if e.err != nil {
			st.segFailed++
		} else {
			st.segPublished++
		}
		if st.segPublished+st.segFailed >= settledRun {
			st.flushSettled()
		}
	}
	st.count(status, e.size)
	if status == http.StatusOK && (st.idle || e.seq%8 == 0) {
		// The record's span has ended (Recording is false now); its sampled flag says
		// whether the trace was exported, so whether it can be the bucket's exemplar.
		now := time.Now()
		st.srv.obs.PublishLatency(st.route, now.Sub(e.start), e.span.SpanContext())
		if st.streaming && !e.answered.IsZero() {
			st.staged = append(st.staged, stageSample{read: e.read, start: e.start, answered: e.answered, settled: now})
		}
	}
}

// stageSample is a sampled record's times, kept until its receipt is written.
type stageSample struct{ read, start, answered, settled time.Time }

// observeStages reports the stages of the sampled records whose receipts were written
// at written.
func (st *stream) observeStages(written time.Time) {
	for _, s := range st.staged {
		if !s.read.IsZero() {
			st.srv.obs.PublishStage(st.route, "read", s.start.Sub(s.read))
		}
		st.srv.obs.PublishStage(st.route, "send", s.answered.Sub(s.start))
		st.srv.obs.PublishStage(st.route, "order", s.settled.Sub(s.answered))
		st.srv.obs.PublishStage(st.route, "write", written.Sub(s.settled))
	}
	st.staged = st.staged[:0]
}

func (st *stream) count(status int, bytes int64) {
	for i := range st.tallies {
		if st.tallies[i].status == status {
			st.tallies[i].n++
			st.tallies[i].bytes += bytes
			return
		}
	}
	st.tallies = append(st.tallies, tally{status: status, n: 1, bytes: bytes})
}

// settledRun is how many settled records the collector counts into the stream's
// segments at once, at most (and whenever it waits or writes).
const settledRun = 64

func (st *stream) flushSettled() {
	if st.segPublished+st.segFailed > 0 {
		st.segments.Settled(st.segPublished, st.segFailed)
		st.segPublished, st.segFailed = 0, 0
	}
}

func (st *stream) flushTallies() {
	for i := range st.tallies {
		if t := &st.tallies[i]; t.n > 0 {
			st.srv.obs.RecordsSettled(st.route, t.status, t.n, t.bytes)
			t.n, t.bytes = 0, 0
		}
	}
}

// appendReceipt appends {"seq":N,"status":200,"topic":...,"messageId":...} as a record.
func appendReceipt(b []byte, e *entry) []byte {
	var tmp [256]byte
	r := append(tmp[:0], `{"seq":`...)
	r = strconv.AppendInt(r, e.seq, 10)
	r = append(r, `,"status":200,"topic":`...)
	r = appendJSONString(r, e.topic)
	if e.sequence >= 0 {
		r = append(r, `,"sequence":`...)
		r = strconv.AppendInt(r, e.sequence, 10)
	}
	if e.dup {
		r = append(r, `,"duplicate":true}`...)
		return recordio.AppendRecord(b, r)
	}
	r = append(r, `,"messageId":`...)
	r = appendJSONString(r, e.id)
	r = append(r, '}')
	return recordio.AppendRecord(b, r)
}

func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of strings and numbers are encoded
	}
	return b
}

// bodyReader reads the request body with the idle timeout, and fails at once after
// stopReading.
type bodyReader struct {
	st *stream
	r  io.Reader
}

func (b *bodyReader) Read(p []byte) (int, error) {
	st := b.st
	st.bodyMu.Lock()
	if st.stopErr != nil {
		err := st.stopErr
		st.bodyMu.Unlock()
		return 0, err
	}
	if st.sawEOF.Load() {
		// Ended: no deadline for a read that has nothing to wait for (see below).
		st.bodyMu.Unlock()
		return 0, io.EOF
	}
	_ = st.rc.SetReadDeadline(time.Now().Add(st.limits.IdleTimeout))
	st.bodyMu.Unlock()
	n, err := b.r.Read(p)
	st.lastRead = time.Now()
	if errors.Is(err, io.EOF) {
		// net/http lifted the read deadline as the body ended and reads the connection in
		// the background from then on; a deadline set meanwhile (stopReading, racing with
		// this read) would fail that read and cancel the connection's context, and with it
		// every later request of a kept-alive client. Lifted again, and none is set after.
		st.bodyMu.Lock()
		st.sawEOF.Store(true)
		_ = st.rc.SetReadDeadline(time.Time{})
		st.bodyMu.Unlock()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		st.bodyMu.Lock()
		stop := st.stopErr
		st.bodyMu.Unlock()
		switch {
		case stop != nil:
			return n, stop
		case isTimeout(err):
			return n, fmt.Errorf("%w (ingress.idleTimeout is %s)", errIdle, st.limits.IdleTimeout)
		case errors.Is(err, io.ErrUnexpectedEOF):
			// The body ended before its Content-Length (or its last chunk): a client that
			// half-closed may still be reading, and is told so (400), not "went away".
			return n, fmt.Errorf("the request body ended early: %w", err)
		case st.ctx.Err() != nil:
			return n, st.ctx.Err()
		}
	}
	return n, err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
