package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// run opens one request after another while records are held, waiting between failed
// ones, until Close (with nothing held) or a failure for good.
func (p *Publisher) run() {
	defer close(p.done)
	attempt := 0
	for {
		if !p.waitForRecords() {
			return
		}
		res := p.request()
		if res.fatal != nil {
			p.fail(res.fatal)
			return
		}
		if res.progressed {
			attempt = 0
		}
		if res.cause == nil {
			continue
		}
		wait := max(p.backoff.next(attempt), res.retryAfter)
		attempt++
		p.mu.Lock()
		p.stats.Retries++
		p.mu.Unlock()
		if p.opts.OnRetry != nil {
			p.opts.OnRetry(p.NextSequence(), res.cause, wait)
		}
		if sleep(p.ctx, wait) != nil {
			p.fail(ErrClosed)
			return
		}
	}
}

// waitForRecords waits until records are held (true) or the Publisher is closing with
// none, or cut (false).
func (p *Publisher) waitForRecords() bool {
	for {
		p.mu.Lock()
		has, closing := p.head < len(p.recs), p.closing
		p.mu.Unlock()
		if p.ctx.Err() != nil {
			p.fail(ErrClosed)
			return false
		}
		if has {
			return true
		}
		if closing {
			p.fail(ErrClosed)
			return false
		}
		select {
		case <-p.wake:
		case <-p.ctx.Done():
		}
	}
}

// result is how a request ended.
type result struct {
	progressed bool          // some record got its final outcome
	cause      error         // why records are still held (nil: ended cleanly)
	retryAfter time.Duration // the bridge's wait, at least
	fatal      error         // stop for good
}

// retriedStatus are the answers before the stream that are waited out and retried: 409
// (another request still holds the stream), 429, 503, 408, and a load balancer's 502/504
// while no replica answers.
func retriedStatus(s int) bool {
	switch s {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable,
		http.StatusRequestTimeout, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusInternalServerError:
		return true
	}
	return false
}

// refusedForGood are the record statuses that are final: the record was not stored and is
// never resent (docs/exactly-once.md). Every other failure is resent.
func refusedForGood(s int) bool {
	switch s {
	case 400, 404, 413, 415, 422, 502:
		return true
	}
	return false
}

// request sends the held records from the first without an outcome on, with what is
// published meanwhile, and settles them as their receipts come.
func (p *Publisher) request() result {
	p.mu.Lock()
	first := p.recs[p.head]
	b := &body{p: p, pos: first.off, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	p.body = b
	p.stats.Requests++
	for i := p.head; i < len(p.recs) && p.recs[i].off < p.written; i++ {
		p.stats.Resent++
	}
	p.mu.Unlock()
	defer b.end()

	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, b)
	if err != nil {
		return result{fatal: fmt.Errorf("client: %w", err)}
	}
	if err := p.conn.prepare(ctx, req); err != nil {
		return result{cause: err}
	}
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", p.opts.ContentType)
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", "application/json")
	if p.opts.StreamName != "" {
		req.Header.Set("Stream-Name", p.opts.StreamName)
		req.Header.Set("Stream-Sequence", strconv.FormatUint(first.seq, 10))
	}
	var answers atomic.Int64
	stalled := p.watch(b, &answers, cancel)
	res := p.exchange(req, b, first.seq, &answers)
	if stalled() && res.fatal == nil {
		res.cause = fmt.Errorf("client: no answer for %v with records sent and unanswered: %w", p.opts.ReceiptTimeout, errStalled)
	}
	return res
}

var errStalled = errors.New("the request stalled")

func (p *Publisher) exchange(req *http.Request, b *body, first uint64, answers *atomic.Int64) result {
	resp, err := p.conn.client.Do(req)
	if err != nil {
		if p.ctx.Err() != nil {
			return result{fatal: ErrClosed}
		}
		return result{cause: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		se := statusError(resp)
		if retriedStatus(resp.StatusCode) {
			return result{cause: se, retryAfter: se.RetryAfter}
		}
		return result{fatal: se}
	}
	return p.readReceipts(resp.Body, b, first, answers)
}

// watch cuts the request (cancel) once records have waited ReceiptTimeout without any
// answer; the returned function, called when the request is over, stops watching and
// reports whether it cut.
func (p *Publisher) watch(b *body, answers *atomic.Int64, cancel context.CancelFunc) (stalled func() bool) {
	timeout := p.opts.ReceiptTimeout
	if timeout < 0 {
		return func() bool { return false }
	}
	var cut atomic.Bool
	over := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(max(timeout/8, time.Millisecond))
		defer tick.Stop()
		last, quiet := int64(-1), time.Now()
		for {
			select {
			case <-over:
				return
			case now := <-tick.C:
				p.mu.Lock()
				waiting := false
				if r := p.firstUnreportedLocked(); r != nil && r.off < b.pos {
					waiting = true
				}
				p.mu.Unlock()
				if n := answers.Load(); n != last || !waiting {
					last, quiet = n, now
					continue
				}
				if now.Sub(quiet) >= timeout {
					cut.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	return func() bool {
		close(over)
		<-done
		return cut.Load()
	}
}

// readReceipts settles records by their receipts until the summary.
func (p *Publisher) readReceipts(r io.Reader, b *body, first uint64, answers *atomic.Int64) result {
	var res result
	rd := recordio.NewReader(r)
	w := wireReceipt{ids: new(idArena)}
	for {
		rec, err := rd.Next()
		if err != nil {
			if p.ctx.Err() != nil {
				res.fatal = ErrClosed
				return res
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			res.cause = fmt.Errorf("client: reading receipts: %w", err)
			return res
		}
		answers.Add(1)
		if err := w.parse(rec); err != nil {
			res.cause = fmt.Errorf("client: a receipt that does not parse (%w): %.200q", err, rec)
			return res
		}
		if w.summary {
			b.end() // the bridge reads no more; ending the body lets it close at once
			return p.summarize(res, &w, b)
		}
		if w.seq < 0 {
			res.cause = fmt.Errorf("client: a receipt with seq %d", w.seq)
			return res
		}
		seq := first + uint64(w.seq)
		if p.opts.StreamName != "" && w.hasSequence && w.sequence != seq {
			res.cause = fmt.Errorf("client: receipt %d names record %d, expected %d", w.seq, w.sequence, seq)
			return res
		}
		switch {
		case w.status == http.StatusOK:
			out := Persisted
			if w.duplicate {
				out = Duplicate
			}
			if p.settle(seq, Receipt{Sequence: seq, Outcome: out, Status: 200, Topic: w.topic, MessageID: w.messageID}) {
				res.progressed = true
			}
		case refusedForGood(w.status):
			if p.settle(seq, Receipt{Sequence: seq, Outcome: Refused, Status: w.status, Topic: w.topic,
				Err: &RecordError{Sequence: seq, Status: w.status, Message: w.err}}) {
				res.progressed = true
			}
		case w.status == http.StatusConflict:
			res.fatal = fmt.Errorf("client: record %d: %w (%s)", seq, ErrTakenOver, w.err)
			return res
		default:
			// Failed for now: resent from here. The bridge stops reading at the first
			// such record; those after it on other topics may still be stored.
			if res.cause == nil {
				res.cause = &StatusError{Status: w.status, Message: fmt.Sprintf("record %d: %s", seq, w.err)}
			}
		}
	}
}

// summarize ends a request at its summary: records the request carried that still have
// no outcome (the bridge stopped at a temporary failure, or never read them) are resent.
func (p *Publisher) summarize(res result, w *wireReceipt, b *body) result {
	res.retryAfter = time.Duration(w.retryAfter) * time.Second
	p.mu.Lock()
	pending, sent := p.firstUnreportedLocked(), b.pos
	p.mu.Unlock()
	if pending == nil || pending.off >= sent {
		// Everything this request carried has its outcome; what was published after its
		// body ended goes on the next request, at once.
		res.cause = nil
		return res
	}
	if res.cause == nil {
		res.cause = &StatusError{Status: w.status, Message: w.err, RetryAfter: res.retryAfter}
	}
	return res
}

// settle records seq's final outcome and reports it, once; false if it had one already.
func (p *Publisher) settle(seq uint64, rc Receipt) bool {
	p.mu.Lock()
	if p.head >= len(p.recs) || seq < p.recs[p.head].seq {
		p.mu.Unlock()
		return false
	}
	i := p.head + int(seq-p.recs[p.head].seq)
	if i >= len(p.recs) || p.recs[i].reported {
		p.mu.Unlock()
		return false
	}
	p.recs[i].reported = true
	switch rc.Outcome {
	case Persisted:
		p.stats.Persisted++
	case Duplicate:
		p.stats.Duplicates++
	case Refused:
		p.stats.Refused++
	}
	p.releaseLocked()
	p.mu.Unlock()
	if p.opts.OnReceipt != nil {
		p.opts.OnReceipt(rc)
	}
	return true
}

// releaseLocked drops the settled records at the front.
func (p *Publisher) releaseLocked() {
	n := 0
	for p.head < len(p.recs) && p.recs[p.head].reported {
		p.held -= p.recs[p.head].size
		p.head++
		n++
	}
	if n == 0 {
		return
	}
	p.signalLocked()
	// Free the bytes before the first record held, and before the body's position: it
	// may still have to send records settled already (on a resend, those reported after
	// a failure for now).
	upTo := p.buf.end
	if p.head < len(p.recs) {
		upTo = p.recs[p.head].off
	}
	if b := p.body; b != nil {
		upTo = min(upTo, b.pos)
	}
	p.buf.release(upTo)
	if p.head == len(p.recs) {
		// Nothing held: start the list again, unless the body still has bytes to send.
		if b := p.body; b == nil || b.pos >= p.buf.end {
			p.recs = p.recs[:0]
			p.head = 0
		}
		return
	}
	if p.head > 1024 && p.head > len(p.recs)/2 {
		p.recs = p.recs[:copy(p.recs, p.recs[p.head:])]
		p.head = 0
	}
}

func (p *Publisher) firstUnreportedLocked() *held {
	for i := p.head; i < len(p.recs); i++ {
		if !p.recs[i].reported {
			r := p.recs[i]
			return &r
		}
	}
	return nil
}

// body is a request's body: the held records from the request's first on, then each
// record as it is published, until the request ends (or, closing, everything is sent).
type body struct {
	p     *Publisher
	pos   int64 // the next byte of the stream to send; guarded by p.mu
	ended bool  // guarded by p.mu
	wake  chan struct{}
	stop  chan struct{}
}

func (b *body) Read(q []byte) (int, error) {
	p := b.p
	spins, seen := 0, uint64(0)
	for {
		p.mu.Lock()
		if b.ended {
			p.mu.Unlock()
			return 0, io.EOF
		}
		if b.pos < p.buf.start() {
			p.mu.Unlock()
			return 0, errors.New("client: the request's records were released before they were sent")
		}
		if end := p.buf.end; b.pos < end {
			if end-b.pos < coalesce && spins < 2 && !p.closing && p.stats.Published != seen {
				// Records are coming in: let them gather, so a burst goes out as one
				// chunk and one write instead of one per record. Each yield costs
				// microseconds; an idle publisher's record goes at once.
				seen = p.stats.Published
				spins++
				p.mu.Unlock()
				runtime.Gosched()
				continue
			}
			n := p.buf.read(q, b.pos)
			b.pos += int64(n)
			p.written = max(p.written, b.pos)
			p.mu.Unlock()
			return n, nil
		}
		closing := p.closing
		p.mu.Unlock()
		if closing {
			return 0, io.EOF // everything is sent: the bridge answers the summary after the last receipt
		}
		select {
		case <-b.wake:
		case <-b.stop:
		}
	}
}

// coalesce is how much a body lets gather while records are being published.
const coalesce = 16 << 10

// end ends the body (the request is over or its summary came) and detaches it.
func (b *body) end() {
	p := b.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !b.ended {
		b.ended = true
		close(b.stop)
	}
	if p.body == b {
		p.body = nil
	}
}

func (b *body) Close() error {
	b.end()
	return nil
}

// statusError reads a refusal before the stream: {"status":S,"error":"..."}.
func statusError(resp *http.Response) *StatusError {
	se := &StatusError{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header)}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var w wireReceipt
	if w.parse(data) == nil && w.err != "" {
		se.Message = w.err
	} else {
		se.Message = http.StatusText(resp.StatusCode)
	}
	return se
}
