package ingress

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/recordio-bridge/bridge/recordio"
)

// maxListedFailures bounds the failures a one-answer response lists.
const maxListedFailures = 100

// idleReceiptBuffer is the most receipt buffer the collector keeps while it waits for
// the next record; larger ones wait in receiptBuffers for the next burst of any stream.
const idleReceiptBuffer = 1 << 10

var receiptBuffers sync.Pool // of *[]byte

// tally aggregates settled records for the Observer between flushes.
type tally struct {
	status   int
	n, bytes int64
}

// collect settles records in input order and writes their receipts, flushing whenever
// the next outcome is not ready yet.
func (st *stream) collect() {
	res := st.c.Response()
	var buf []byte
	var box *[]byte // buf's box in receiptBuffers, if it came from there
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
		e, closed := st.pending.take()
		if e == nil && !closed {
			flush()
			if cap(buf) > idleReceiptBuffer {
				// A burst's receipts' room: not kept while the stream is idle.
				if box == nil {
					box = new([]byte)
				}
				*box, buf = buf, nil
				receiptBuffers.Put(box)
				box = nil
			}
			e = st.pending.wait()
			if buf == nil {
				if box, _ = receiptBuffers.Get().(*[]byte); box != nil {
					buf = (*box)[:0]
				}
			}
		}
		if e == nil {
			flush()
			return
		}
		if !e.ready.Load() {
			flush()
			if !st.pending.awaitOutcome(e, st.abandonC) {
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
	if status == http.StatusOK && e.timed {
		// The record's span has ended (Recording is false now); its sampled flag says
		// whether the trace was exported, so whether it can be the bucket's exemplar.
		now := clock()
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
