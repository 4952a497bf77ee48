package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sync"
	"time"
)

// Outcome is a record's final outcome.
type Outcome int

const (
	// Persisted: the broker stored the record.
	Persisted Outcome = iota + 1
	// Duplicate: the broker had the record already (a named stream's resend); nothing new
	// was stored.
	Duplicate
	// Refused: refused for good; the broker did not store it and it is not sent again.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Persisted:
		return "persisted"
	case Duplicate:
		return "duplicate"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Receipt is a record's final outcome.
type Receipt struct {
	// Sequence is the record's number: with a stream name, its Stream-Sequence number;
	// without, its place counted from FirstSequence.
	Sequence uint64
	Outcome  Outcome
	Status   int    // the record's status: 200, or the refusal's
	Topic    string // where it was stored (empty when refused)
	// MessageID is "ledger:entry:partition:batchIndex"; empty for a duplicate or a refusal.
	// Ids share 1 KiB blocks: keeping a few of very many, strings.Clone them.
	MessageID string
	Err       error // a *RecordError when Refused, else nil
}

// PublisherOptions configure a Publisher. URL is required; the rest have defaults.
type PublisherOptions struct {
	// URL is the route's publishing URL, e.g. http://127.0.0.1:8080/v1/publish/mesos.
	URL string
	// ContentType is the records' type, sent as Message-Content-Type
	// (default application/json).
	ContentType string
	// StreamName makes the stream exactly-once (Stream-Name): 1 to 128 characters of
	// A-Za-z0-9._-, the same on every run of the caller. Empty: at-least-once, a record
	// whose receipt was lost is stored again when it is resent.
	StreamName string
	// FirstSequence is the number of the first record published (Stream-Sequence with a
	// stream name); each following record has the next. See the package documentation for
	// how to choose it after a restart.
	FirstSequence uint64
	// MaxUnreceiptedBytes bounds the records held until their receipts (default 8 MiB);
	// Publish waits for room. A record larger than the bound is taken when nothing else
	// is held.
	MaxUnreceiptedBytes int64
	// OnReceipt is called with each record's final outcome, from one goroutine, in the
	// order the outcomes arrive: by sequence, except that a record persisted after an
	// earlier one failed for now (another topic) is reported before that earlier one's
	// resend. It must not block for long: receipts wait behind it; and it must not call
	// Publish, Flush or Close, which may wait for the receipts it holds up. Nil: outcomes
	// are only counted (Stats).
	OnReceipt func(Receipt)
	// OnRetry is called before each wait to resend: the first record to be sent again, why
	// the last request ended, and the wait. Nil: nothing is called.
	OnRetry func(next uint64, cause error, wait time.Duration)
	// ReceiptTimeout cuts a request that has records sent and unanswered and has answered
	// nothing for this long (default 1 minute; negative: never). The bridge owes each
	// record a receipt, or a 503, within its publish timeout, so such silence is a dead
	// path (a half-open connection, a frozen process): the records are sent again on a new
	// request.
	ReceiptTimeout time.Duration
	// Backoff is the wait between failed requests (zero fields: DefaultBackoff's). A
	// Retry-After from the bridge is waited out at least.
	Backoff Backoff
	// HTTPClient sends the requests; it must not set a Timeout, since a request lasts as
	// long as the stream. Nil: a client of its own, with TLSConfig.
	HTTPClient *http.Client
	// TLSConfig is used for https URLs when HTTPClient is nil.
	TLSConfig *tls.Config
	// Token gives the bearer token sent with each request; nil sends none.
	Token TokenSource
	// Header is added to every request (e.g. headers the route maps to message properties).
	Header http.Header
}

// PublisherStats counts what a Publisher did.
type PublisherStats struct {
	Published  uint64 // records taken by Publish
	Persisted  uint64 // receipted 200, stored
	Duplicates uint64 // receipted 200, duplicate: the broker had them already
	Refused    uint64 // refused for good
	Requests   uint64 // requests opened
	Retries    uint64 // requests that failed and were followed by another
	Resent     uint64 // records sent again after a failure
}

// Publisher sends records on one long request at a time and resumes after failures from
// the first record without a final receipt. It is safe for concurrent use; records are
// numbered in the order Publish takes them.
type Publisher struct {
	opts    PublisherOptions
	url     string
	conn    connection
	backoff Backoff
	max     int64

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	wake   chan struct{} // kicks run when records arrive or Close begins

	mu       sync.Mutex
	buf      recordBuffer // the held records, encoded
	recs     []held       // recs[head:] are held, in sequence order, consecutive numbers
	head     int
	held     int64 // record bytes held
	nextSeq  uint64
	written  int64 // the furthest byte any request's body has reached
	body     *body // the current request's body, nil between requests
	closing  bool
	err      error         // why the Publisher stopped for good
	progress chan struct{} // closed when records are settled or the Publisher stops; made by waiters
	stats    PublisherStats
}

type held struct {
	seq      uint64
	off, end int64 // the encoded record's bytes in the stream
	size     int64
	reported bool // its outcome was given already (a record after a temporary failure)
}

var streamNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// NewPublisher checks opts and starts the Publisher; it opens a request when the first
// record is published. Close it to stop.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	u, err := checkURL("publisher URL", opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.StreamName != "" && !streamNameRE.MatchString(opts.StreamName) {
		return nil, fmt.Errorf("client: stream name %q: want 1 to 128 characters of A-Za-z0-9._-", opts.StreamName)
	}
	if opts.FirstSequence > math.MaxInt64 {
		return nil, fmt.Errorf("client: first sequence %d is above 2^63-1", opts.FirstSequence)
	}
	if opts.MaxUnreceiptedBytes < 0 {
		return nil, fmt.Errorf("client: MaxUnreceiptedBytes %d is negative", opts.MaxUnreceiptedBytes)
	}
	if opts.ContentType == "" {
		opts.ContentType = "application/json"
	}
	p := &Publisher{
		opts:    opts,
		url:     u.String(),
		conn:    newConnection(opts.HTTPClient, opts.TLSConfig, opts.Token, opts.Header),
		backoff: opts.Backoff.withDefaults(),
		max:     opts.MaxUnreceiptedBytes,
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		nextSeq: opts.FirstSequence,
	}
	if p.max == 0 {
		p.max = 8 << 20
	}
	if p.opts.ReceiptTimeout == 0 {
		p.opts.ReceiptTimeout = time.Minute
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.run()
	return p, nil
}

// Publish takes a record (copied: the caller may reuse rec) and returns its number. It
// waits while MaxUnreceiptedBytes are held, until ctx ends. The record's outcome comes to
// OnReceipt; Flush waits for every outcome. After the Publisher stopped for good, Publish
// returns why; after Close, ErrClosed.
func (p *Publisher) Publish(ctx context.Context, rec []byte) (uint64, error) {
	p.mu.Lock()
	for {
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return 0, err
		}
		if p.closing {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		if p.held == 0 || p.held+int64(len(rec)) <= p.max {
			break
		}
		ch := p.progressLocked()
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("client: waiting for room among the unreceipted records: %w", ctx.Err())
		}
		p.mu.Lock()
	}
	seq := p.nextSeq
	if p.opts.StreamName != "" && seq > math.MaxInt64 {
		p.mu.Unlock()
		return 0, fmt.Errorf("client: record number %d is above 2^63-1", seq)
	}
	p.nextSeq++
	off := p.buf.append(rec)
	p.recs = append(p.recs, held{seq: seq, off: off, end: p.buf.end, size: int64(len(rec))})
	p.held += int64(len(rec))
	p.stats.Published++
	if b := p.body; b != nil {
		kick(b.wake)
	}
	p.mu.Unlock()
	kick(p.wake)
	return seq, nil
}

// Flush waits until every record published so far has its final outcome, or ctx ends, or
// the Publisher stops for good (its error).
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	for p.head < len(p.recs) {
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return err
		}
		ch := p.progressLocked()
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("client: flushing, record %d and later not receipted: %w", p.NextSequence(), ctx.Err())
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return nil
}

// Close stops taking records, waits until every record has its outcome (as Flush), ends
// the request and releases everything. When ctx ends first, the request is cut and the
// records without an outcome are dropped: NextSequence names the first of them, to publish
// again from there. Close returns the error the Publisher stopped with, if any.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	if b := p.body; b != nil {
		kick(b.wake)
	}
	p.mu.Unlock()
	kick(p.wake)
	var err error
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cancel()
		<-p.done
		err = fmt.Errorf("client: closing, record %d and later not receipted: %w", p.NextSequence(), ctx.Err())
	}
	p.cancel()
	p.conn.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil && !errors.Is(p.err, ErrClosed) {
		return p.err
	}
	return err
}

// NextSequence is the number of the first record without a final outcome (the next
// record's number when all have one): where a caller that restarts publishes from.
func (p *Publisher) NextSequence() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head < len(p.recs) {
		return p.recs[p.head].seq
	}
	return p.nextSeq
}

// Stats returns the Publisher's counts so far.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Err returns why the Publisher stopped for good, or nil while it runs.
func (p *Publisher) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// progressLocked returns a channel closed at the next settlement or stop.
func (p *Publisher) progressLocked() chan struct{} {
	if p.progress == nil {
		p.progress = make(chan struct{})
	}
	return p.progress
}

func (p *Publisher) signalLocked() {
	if p.progress != nil {
		close(p.progress)
		p.progress = nil
	}
}

// fail stops the Publisher for good with err.
func (p *Publisher) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.signalLocked()
	p.mu.Unlock()
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
