package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

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
	pending     *pendingQueue  // records awaiting their outcome, in input order
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

func newStream(s *Server, c echo.Context, parent context.Context, route string, req *mapping.Request, l Limits, streaming, rio bool) *stream {
	ctx, cancel := context.WithCancel(parent)
	st := &stream{srv: s, c: c, rc: http.NewResponseController(c.Response()), route: route, req: req, limits: l,
		streaming: streaming, recordio: rio, ctx: ctx, cancel: cancel,
		pending: newPendingQueue(l.PendingRecords), abandonC: make(chan struct{})}
	st.budget = budget.New(l.PendingBytes)
	if s.tr.Enabled {
		st.streamSpan = trace.SpanContextFromContext(ctx)
		if rio {
			st.segments = s.tr.NewSegments("POST "+route, st.streamSpan)
		}
	}
	return st
}

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
//
// While a stream is idle its handler waits in the body's read below run, and the runtime
// halves a parked goroutine's stack at a collection only when less than a quarter of it
// is in use: what starts and ends the stream (the answer's head, the summary) is in
// functions of their own, so that their frames are not on the stack while it waits.
func (st *stream) run() int {
	defer st.cancel()
	if st.streaming {
		st.begin()
	}
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		st.collect()
	}()
	endErr := st.readAll()
	records := st.accepted
	st.pending.close()
	<-collected
	return st.finish(endErr, records)
}

// begin writes the head of a streaming answer.
func (st *stream) begin() {
	// HTTP/1.1 needs full duplex to write receipts while the body is still coming;
	// HTTP/2 always is (EnableFullDuplex then reports it is not needed).
	_ = st.rc.EnableFullDuplex()
	res := st.c.Response()
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

// finish ends the stream once its records are read and settled: it writes the summary
// (or the one answer) and returns the status.
func (st *stream) finish(endErr error, records int64) int {
	res := st.c.Response()
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

func isFraming(err error) bool {
	return errors.Is(err, recordio.ErrBadHeader) || errors.Is(err, recordio.ErrRecordTooLarge) || errors.Is(err, recordio.ErrTruncated)
}

func isFramingError(err error) bool {
	var re *recordio.Error
	return errors.As(err, &re) && isFraming(re.Err)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of strings and numbers are encoded
	}
	return b
}
