package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// entry is one record between its publication and its receipt.
type entry struct {
	seq      int64
	size     int64 // the record's payload bytes
	charge   int64 // what it holds of ingress.pendingBytes: payload, key and properties
	start    time.Time
	read     time.Time     // the body read that completed it returned (the read stage)
	answered time.Time     // the publisher's callback ran (the end of the send stage)
	ready    atomic.Bool   // the outcome (id, err, answered) is in: see settled
	q        *pendingQueue // the stream's queue, whose collector may wait for it
	id       string
	topic    string
	err      error
	complete func(id string, err error) // e.settle, made once per pooled entry
	span     telemetry.RecordSpan       // the record's publish span (zero with tracing off)
	sequence int64                      // a named stream's sequence number, else -1
	dup      bool                       // named: the broker already had it
	// idle: the collector waited for it (its stream was idle; see pendingQueue.push).
	// timed: the record is in the latency sample (every 8th, and every one that finds
	// its stream idle), so start and answered are read from the clock; for the others
	// they are not (two clock reads per record were 3 % of the ingress path's CPU).
	idle, timed bool
}

// clock is the ingress path's clock (a test counts its reads).
var clock = time.Now

var entryPool = sync.Pool{New: func() any {
	e := &entry{}
	e.complete = func(id string, err error) {
		e.id, e.err = id, err
		if e.timed {
			e.answered = clock()
		}
		e.settled()
	}
	return e
}}

// settled hands the entry's outcome to the collector: a flag, and a wake-up only when
// the collector waits for this entry. A channel send per record (a lock of the entry's
// channel on the publisher's callback goroutine, another to receive on the collector)
// was 4 % of the ingress path's CPU at saturation, where the collector, draining
// receipts faster than they come, waits about once per burst of them.
func (e *entry) settled() {
	q := e.q // read before the flag: once it is set, the entry may be settled and reused
	e.ready.Store(true)
	if q.waitingOn.Load() == e {
		q.signal(q.more)
	}
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

// readAll reads and publishes records until the body ends or the stream must stop.
func (st *stream) readAll() error {
	body := &bodyReader{st: st, r: st.c.Request().Body}
	if !st.recordio {
		return st.readOne(body)
	}
	rd := st.newRecordReader(body)
	for {
		// Waiting for the next record here, outside the decoding and publishing of one,
		// keeps their frames off the stack while the stream is idle (see run).
		rd.Wait()
		if more, err := st.readNext(rd); !more {
			return err
		}
	}
}

// readNext reads and publishes one record. It reports whether there may be more: not
// after the body's clean end (err nil) or an error that stops the stream.
//
//go:noinline
func (st *stream) readNext(rd *recordio.Reader) (more bool, err error) {
	rec, err := rd.NextRecord()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, err
	}
	if err := st.publish(rec); err != nil {
		return false, err
	}
	return true, nil
}

// newRecordReader returns the RecordIO reader of the body.
func (st *stream) newRecordReader(body io.Reader) *recordio.Reader {
	bufMax := min(st.limits.BufferRecordBytes, st.limits.MaxRecordBytes)
	return recordio.NewReader(body, recordio.MaxRecordSize(int(bufMax)), recordio.StreamLargerRecords(1<<62), recordio.BufferSize(64<<10))
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
	e.seq, e.size, e.charge, e.topic, e.id, e.err = rec.Index, rec.Size, charge, tg.Topic, "", nil
	e.read, e.start, e.answered, e.timed = st.lastRead, time.Time{}, time.Time{}, false
	e.sequence, e.dup, e.q = sequence, false, st.pending
	e.ready.Store(false)
	if tr := st.srv.tr; tr.Enabled {
		e.start = clock() // the span's start
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
	if st.pending.push(e, st.ctx.Done()) {
		st.accepted++
	} else {
		st.budget.Release(charge)
		st.srv.tr.EndRecord(&e.span, "", st.ctx.Err()) // never sent: a failed record
		return st.ctx.Err()
	}
	// Whether it is sampled is known once it is queued (push says whether the stream
	// was idle); the collector reads start and timed only once it is answered, which
	// is after the publisher is given it below.
	if e.timed = e.idle || rec.Index%8 == 0; e.timed && e.start.IsZero() {
		e.start = clock()
	}
	start := e.start
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
	e.seq, e.size, e.charge, e.start, e.topic, e.id = seq, 0, 0, clock(), "", ""
	e.read, e.answered, e.timed = time.Time{}, time.Time{}, false
	e.err = &statusError{status: status, err: err}
	e.sequence, e.dup, e.q = -1, false, st.pending
	e.ready.Store(false)
	if st.named != nil {
		if n, ok := st.named.sequenceOf(seq); ok {
			e.sequence = n
		}
	}
	if tr := st.srv.tr; tr.Enabled {
		// Failed records are always traced (EndRecord records the span if it was not sampled).
		tr.StartPublish(&e.span, st.recordParent(nil), st.segments.Next(0), "", 0, e.start)
	}
	if st.pending.push(e, st.ctx.Done()) {
		st.accepted++
	} else {
		st.srv.tr.EndRecord(&e.span, "", e.err)
		return st.ctx.Err()
	}
	e.settled()
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
