package pulsar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// messageOverhead bounds from above what m adds to the entry carrying it besides its
// payload: the metadata (producer name, key, properties, ... repeated in every chunk of
// a chunked message) and the SEND command. A message whose payload and overhead exceed
// the broker's limit is chunked; chunks are sized so that each, metadata included, fits.
func messageOverhead(m *ProducerMessage, producerName string) int {
	n := 160 + len(producerName) + len(m.Key) + len(m.OrderingKey)
	for k, v := range m.Properties {
		n += len(k) + len(v) + 12
	}
	if m.Extra.Key != "" {
		n += len(m.Extra.Key) + len(m.Extra.Value) + 12
	}
	return n
}

// chunkFieldsRoom is what the chunk fields (uuid, counts, sizes) add to a chunk's metadata.
func chunkFieldsRoom(producerName string) int { return 64 + len(producerName) + 20 }

type sendRequest struct {
	callback func(MessageID, error)
	// direct callbacks only hand the result to a buffered channel (a synchronous Send):
	// they run at once, wherever the result is known, so a Send made from inside another
	// callback cannot wait on the dispatcher that is running it.
	direct bool
}

// deliver runs req's callback directly or queues it for the dispatcher.
func deliver(cs []completion, req sendRequest, id MessageID, err error) []completion {
	if req.callback == nil {
		return cs
	}
	if req.direct {
		req.callback(id, err)
		return cs
	}
	return append(cs, completion{req.callback, id, err})
}

// pendingItem is one SEND frame waiting for its receipt: a batch, a single message, or
// one chunk of a chunked message. The frame is kept to be resent after a reconnect.
type pendingItem struct {
	seq, highestSeq uint64
	frame           []byte
	reqs            []sendRequest // callbacks completed by this item's receipt
	batched         bool
	// corrupt: the broker answered this item with ChecksumError, so it was not stored; a
	// later duplicate answer for it (deduplication) is a loss to report, not a success.
	corrupt bool
	numMsgs int // messages counted by the limiter
	bytes   int // bytes counted by the limiter
	created time.Time
}

// frameHeadroom is kept free in front of a batch's payload for the frame header, so a
// batch is framed in place instead of being copied (see frame.PayloadInPlace).
const frameHeadroom = 512

type batch struct {
	buf      []byte // frameHeadroom unused bytes, then the encoded messages
	reqs     []sendRequest
	firstSeq uint64
	lastSeq  uint64
	created  time.Time
	key      string // the key of every message in the batch, unless mixed
	mixed    bool
	// acquired is what the batch's messages took from the pending limiter (their payload
	// bytes), released exactly when the batch completes; size() counts the encoding too.
	acquired int
}

// size is the number of payload bytes in the batch.
func (b *batch) size() int { return max(len(b.buf)-frameHeadroom, 0) }

// partitionProducer publishes to one partition (or one non-partitioned topic).
type partitionProducer struct {
	client    *Client
	topic     string
	partition int32
	opts      ProducerOptions
	id        uint64
	log       *slog.Logger

	limiter *limiter
	cbs     *dispatcher
	// exclusive serialises enqueueing, so the chunks of one message are never
	// interleaved with other messages of this producer (deduplication needs it).
	exclusive chan struct{}

	mu sync.Mutex
	// state, reg and cn are the registration's state machine (see regState): reg is the
	// handle of the attempt in progress or the registration in place, cn its connection
	// once ready (nil otherwise).
	state      regState
	reg        *handle
	cn         *conn.Conn
	readyAt    time.Time // when the registration became ready
	progressed bool      // a receipt arrived since then
	attempts   int       // failed attempts since the last stable registration (drives the backoff)
	// quotaErr is set while the broker refuses the producer because the topic's backlog
	// quota is exceeded with the producer_exception policy: sends fail at once with it
	// (a temporary error) until the producer is registered again.
	quotaErr error
	name     string
	// schemaVersion is the version of the declared schema the broker registered it as,
	// carried by every message.
	schemaVersion []byte
	seq           uint64
	maxMsgSize    int
	pending       []*pendingItem
	batch         batch
	// lastBatchBytes and lastBatchMsgs size the next batch's buffer and request list.
	lastBatchBytes int
	lastBatchMsgs  int
	failed         error // set when the producer stopped for good
	closing        bool
	epoch          uint64
	// topicEpoch is the topic's epoch the broker gave an exclusive registration, sent
	// again with every later one: an exclusive producer that took the topic over since
	// raised it, and the broker then fences this one.
	topicEpoch *uint64
	progress   chan struct{} // closed and replaced when pending shrinks
	reconnects int
	resent     int // frames sent again after a reconnect
	// dedupFloor (Deduplication only) is the highest sequence id this producer has
	// queued or the broker reported at registration, -1 for none: a message at or below
	// it goes in an entry of its own (see ProducerOptions.Deduplication).
	dedupFloor int64

	reconnectCh chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

func newPartitionProducer(c *Client, topic string, partition int32, opts ProducerOptions) *partitionProducer {
	p := &partitionProducer{
		client:      c,
		topic:       topic,
		partition:   partition,
		opts:        opts,
		id:          c.producerID.Add(1),
		log:         c.log.With("topic", topic),
		limiter:     newLimiter(opts.MaxPendingMessages, opts.MaxPendingBytes),
		exclusive:   make(chan struct{}, 1),
		name:        opts.Name,
		maxMsgSize:  frame.DefaultMaxMessageSize,
		progress:    make(chan struct{}),
		dedupFloor:  -1,
		reconnectCh: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	return p
}

// start registers the producer with the broker (failing fast) and starts its goroutines.
func (p *partitionProducer) start(ctx context.Context) error {
	// A connection that closed right after the broker accepted us is a race, and a
	// broker whose metadata is moving refuses for moments: both are tried again, not
	// reported as the creation's failure.
	if err := creationRetry(ctx, p.client.closing, p.opts.Backoff, func() error { return p.connect(ctx, true) }); err != nil {
		return err
	}
	p.cbs = newDispatcher()
	p.wg.Add(1)
	go p.run()
	return nil
}

// handle routes one registration's frames to the producer. Each attempt to register
// has its own handle, so the close of a connection reaches exactly the attempt (or the
// registration) that used it, and a late close of an older one is recognised and ignored.
type handle struct {
	p    *partitionProducer
	cn   *conn.Conn
	lost error // set (under p.mu) when the connection closed while registering
}

func (h *handle) HandleReceipt(r *pb.CommandSendReceipt) { h.p.receipt(h, r) }
func (h *handle) HandleSendError(e *pb.CommandSendError) { h.p.sendError(h, e) }
func (h *handle) HandleClose(reason error)               { h.p.connectionLost(h, reason) }

// detachLocked forgets h as the current registration and unregisters it from its
// connection (only ever the current one: an older handle's id may already belong to a
// newer registration on the same connection).
func (p *partitionProducer) detachLocked(h *handle) {
	if p.reg != h {
		return
	}
	p.reg = nil
	p.cn = nil
	h.cn.RemoveProducer(p.id)
}

func (p *partitionProducer) connect(ctx context.Context, first bool) error {
	ctx, cancel := context.WithTimeout(ctx, p.client.opts.OperationTimeout)
	defer cancel()
	bc, err := p.client.lookup(ctx, p.topic)
	if err != nil {
		return err
	}
	cn, err := p.client.pool.Get(ctx, bc.logical, bc.physical, bc.proxied)
	if err != nil {
		return err
	}
	h := &handle{p: p, cn: cn}
	p.mu.Lock()
	if err := p.stoppedLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	// Attach under p.mu: the handle becomes current and is registered with the
	// connection in one step, so a close can never fall between the two.
	if err := cn.AddProducer(p.id, h); err != nil {
		p.mu.Unlock()
		return err
	}
	p.reg, p.state = h, stateRegistering
	name, epoch, topicEpoch := p.name, p.epoch, p.topicEpoch
	p.mu.Unlock()
	reqID := p.client.nextRequestID()
	cmd := &pb.CommandProducer{
		Topic:                    proto.String(p.topic),
		ProducerId:               proto.Uint64(p.id),
		RequestId:                proto.Uint64(reqID),
		Epoch:                    proto.Uint64(epoch),
		UserProvidedProducerName: proto.Bool(p.opts.Name != ""),
		Schema:                   p.opts.Schema.proto(),
		TopicEpoch:               topicEpoch,
	}
	if p.opts.AccessMode != AccessShared {
		cmd.ProducerAccessMode = p.opts.AccessMode.pb().Enum()
	}
	if name != "" {
		cmd.ProducerName = proto.String(name)
	}
	resp, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: cmd})
	// A registration given up on below (an error or timeout here, or the producer stopped
	// meanwhile) may still be, or become, complete on the broker, which then keeps the
	// name busy on this connection: a named producer's successors would get ProducerBusy
	// for as long as the connection lives. So it is closed there too (after p.mu is
	// released; a close that overtakes the creation cancels it).
	abandoned := false
	defer func() {
		if abandoned {
			p.closeOnBroker(cn)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && resp.GetProducerSuccess() == nil {
		err = fmt.Errorf("unexpected answer %s", resp.GetType())
	}
	if err == nil && h.lost != nil {
		// The broker accepted the producer, but the connection closed before we could
		// record it: a failed attempt, retried on a new connection.
		err = fmt.Errorf("%w: %w", errLostWhileRegistering, h.lost)
	}
	if err == nil && p.reg != h {
		err = errLostWhileRegistering // replaced meanwhile (cannot happen: one attempt at a time)
	}
	if err != nil {
		p.detachLocked(h)
		abandoned = h.lost == nil // a lost connection took the registration with it
		if p.state == stateRegistering {
			p.state = stateReconnecting
		}
		if cerr := p.stoppedLocked(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("pulsar: creating producer on %s: %w", p.topic, fenced(err))
	}
	if err := p.stoppedLocked(); err != nil {
		p.detachLocked(h)
		abandoned = h.lost == nil // a lost connection took the registration with it
		return err
	}
	p.quotaErr = nil
	ps := resp.GetProducerSuccess()
	p.name = ps.GetProducerName()
	if v := ps.GetSchemaVersion(); len(v) > 0 {
		p.schemaVersion = v
	}
	p.epoch++
	if p.opts.AccessMode != AccessShared && ps.TopicEpoch != nil {
		te := ps.GetTopicEpoch()
		p.topicEpoch = &te
	}
	if first {
		if last := ps.GetLastSequenceId(); last >= 0 {
			p.seq = uint64(last) + 1
		}
	}
	if p.opts.Deduplication {
		p.dedupFloor = max(p.dedupFloor, ps.GetLastSequenceId())
	}
	p.cn = cn
	p.state = stateReady
	p.readyAt = time.Now()
	p.progressed = false
	p.maxMsgSize = cn.MaxMessageSize()
	// Resend, in order and with their sequence ids, what the previous connection left
	// without a receipt.
	for _, it := range p.pending {
		if err := cn.SendFrame(it.frame); err != nil {
			break // the new connection died too; its close schedules another attempt
		}
	}
	if !first {
		// Counted with the resends, in the step that makes the producer ready: the
		// receipts for what was resent can reach the application before reconnect()
		// would take the lock again, and Stats must not show the resends without the
		// reconnect that made them.
		p.reconnects++
		p.resent += len(p.pending)
		p.log.Info("producer reconnected", "broker", bc.logical, "resent", len(p.pending))
	}
	return nil
}

// fenced marks a broker's ProducerFenced refusal with ErrProducerFenced.
func fenced(err error) error {
	var se *ServerError
	if errors.As(err, &se) && pb.ServerError(se.Code) == pb.ServerError_ProducerFenced && !errors.Is(err, ErrProducerFenced) {
		return fmt.Errorf("%w: %w", ErrProducerFenced, err)
	}
	return err
}

// closeOnBroker closes the producer's registration on cn without waiting (the broker
// answers success for an id it does not know).
func (p *partitionProducer) closeOnBroker(cn *conn.Conn) {
	reqID := p.client.nextRequestID()
	_ = cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
		CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
}

// run owns the producer's timers: batch delay, send timeouts and reconnects.
func (p *partitionProducer) run() {
	defer p.wg.Done()
	tick := p.opts.BatchingMaxDelay
	if p.opts.SendTimeout > 0 && p.opts.SendTimeout/10 < tick {
		tick = p.opts.SendTimeout / 10
	}
	tick = max(tick, time.Millisecond)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.reconnectCh:
			p.reconnect()
		case now := <-ticker.C:
			p.tick(now)
		}
	}
}

// tick flushes a batch that has waited long enough and fails what has waited longer than
// the send timeout. It also runs between reconnect attempts, so messages batched while
// the connection is down still time out.
func (p *partitionProducer) tick(now time.Time) {
	p.mu.Lock()
	if len(p.batch.reqs) > 0 && now.Sub(p.batch.created) >= p.opts.BatchingMaxDelay {
		p.flushBatchLocked()
	}
	p.mu.Unlock()
	p.failTimedOut(now)
}

// reconnect registers again, waiting the backoff before every attempt but the first
// after a stable registration was lost.
func (p *partitionProducer) reconnect() {
	for {
		p.mu.Lock()
		stop := p.state != stateReconnecting
		attempts := p.attempts
		p.mu.Unlock()
		if stop {
			return
		}
		if attempts > 0 && !p.waitBackoff(p.opts.Backoff.delay(attempts-1)) {
			return
		}
		p.tick(time.Now())
		ctx, cancel := contextUntil(p.done)
		err := p.connect(ctx, false)
		cancel()
		p.tick(time.Now())
		if err == nil {
			return // counted by connect, when it made the producer ready
		}
		p.mu.Lock()
		p.attempts++
		attempts = p.attempts
		p.mu.Unlock()
		if permanentRegistrationError(err, false) {
			p.fail(fmt.Errorf("%w: %w", ErrProducerFailed, err))
			return
		}
		p.quotaRefusal(err)
		p.log.Warn("producer reconnect failed", "attempt", attempts, "error", err)
	}
}

// waitBackoff waits d while still failing timed-out messages; false when the producer closed.
func (p *partitionProducer) waitBackoff(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	timeouts := time.NewTicker(max(min(d/4, time.Second), 10*time.Millisecond))
	defer timeouts.Stop()
	for {
		select {
		case <-p.done:
			return false
		case now := <-timeouts.C:
			p.tick(now)
		case <-deadline.C:
			return true
		}
	}
}

// connectionLost handles the close of h's connection (or the broker closing the producer).
func (p *partitionProducer) connectionLost(h *handle, reason error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reg != h {
		return // an older registration's connection
	}
	switch p.state {
	case stateRegistering:
		// connect is waiting for the answer: it fails the attempt and retries.
		h.lost = reason
		return
	case stateReady:
	default:
		p.detachLocked(h)
		return
	}
	p.detachLocked(h)
	p.state = stateReconnecting
	if p.progressed || time.Since(p.readyAt) >= stableAfter(p.opts.Backoff) {
		p.attempts = 0 // it worked for a while: reconnect at once
	} else {
		p.attempts++ // it died right after registering: keep backing off
	}
	p.log.Warn("producer disconnected; reconnecting", "reason", reason, "attempt", p.attempts)
	select {
	case p.reconnectCh <- struct{}{}:
	default:
	}
}

func (p *partitionProducer) receipt(h *handle, r *pb.CommandSendReceipt) {
	p.mu.Lock()
	cn := h.cn
	if p.reg != h || p.state != stateReady || len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	head := p.pending[0]
	seq := r.GetSequenceId()
	switch {
	case seq < head.seq:
		p.mu.Unlock() // a receipt for something already completed or timed out
		return
	case seq > head.seq:
		p.mu.Unlock()
		cn.Abort(fmt.Errorf("receipt for sequence %d while %d is the oldest pending on %s: resending", seq, head.seq, p.topic))
		return
	}
	p.popLocked()
	p.progressed = true
	ids := r.GetMessageId()
	fns := make([]completion, 0, len(head.reqs))
	if head.corrupt && messageIDFromPB(ids, p.partition).Duplicate() {
		err := fmt.Errorf("%w: sequence %d on %s was refused with ChecksumError and later messages were stored before it was resent",
			ErrCorruptInTransit, head.seq, p.topic)
		if p.opts.Deduplication {
			// The caller's own sequence id: sending it again can only be dropped.
			err = fmt.Errorf("%w (%w)", err, ErrSequenceUsed)
		}
		for _, req := range head.reqs {
			fns = deliver(fns, req, MessageID{}, err)
		}
		if len(p.pending) == 0 && len(p.batch.reqs) > 0 {
			p.flushBatchLocked()
		}
		p.mu.Unlock()
		p.limiter.release(head.numMsgs, head.bytes)
		p.cbs.push(fns...)
		return
	}
	for i, req := range head.reqs {
		id := messageIDFromPB(ids, p.partition)
		if head.batched {
			id.BatchIndex = int32(i)
			id.BatchSize = int32(len(head.reqs))
		} else {
			id.BatchIndex = -1
		}
		fns = deliver(fns, req, id, nil)
	}
	if len(p.pending) == 0 && len(p.batch.reqs) > 0 {
		p.flushBatchLocked() // nothing in flight: what accumulated leaves now
	}
	p.mu.Unlock()
	p.limiter.release(head.numMsgs, head.bytes)
	p.cbs.push(fns...)
}

func (p *partitionProducer) popLocked() {
	p.pending[0] = nil
	p.pending = p.pending[1:]
	close(p.progress)
	p.progress = make(chan struct{})
}

func (p *partitionProducer) sendError(h *handle, e *pb.CommandSendError) {
	cn := h.cn
	se := &ServerError{Code: ServerErrorCode(e.GetError()), Message: e.GetMessage()}
	switch e.GetError() {
	case pb.ServerError_NotAllowedError:
		// A refusal of this one message (above the topic's maxMessageSize, say): fail it
		// and go on, as the Java client does.
		p.refuseHead(cn, e.GetSequenceId(), se)
	case pb.ServerError_TopicTerminatedError, pb.ServerError_ProducerFenced:
		p.fail(fmt.Errorf("%w: sequence %d on %s: %w", ErrProducerFailed, e.GetSequenceId(), p.topic, fenced(se)))
	default:
		if e.GetError() == pb.ServerError_ChecksumError {
			p.markCorrupt(h, e.GetSequenceId())
		}
		cn.Abort(fmt.Errorf("SEND_ERROR for sequence %d on %s: %w; reconnecting to resend", e.GetSequenceId(), p.topic, se))
	}
}

// markCorrupt remembers that the broker refused the pending item with sequence seq as
// corrupt: the broker did not store it, whatever it answers to its resend.
func (p *partitionProducer) markCorrupt(h *handle, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reg != h {
		return
	}
	for _, it := range p.pending {
		if it.seq == seq {
			it.corrupt = true
			return
		}
	}
}

// refuseHead fails the oldest pending item, whose sequence id the broker refused for
// good; the producer goes on with the next. A refusal of anything else is out of step
// with the queue: the connection is reset so everything pending is sent again.
func (p *partitionProducer) refuseHead(cn *conn.Conn, seq uint64, se *ServerError) {
	p.mu.Lock()
	if len(p.pending) == 0 || p.pending[0].seq != seq {
		p.mu.Unlock()
		cn.Abort(fmt.Errorf("SEND_ERROR %s for sequence %d, which is not the oldest pending on %s: resending", se.Code, seq, p.topic))
		return
	}
	head := p.pending[0]
	p.popLocked()
	p.mu.Unlock()
	err := fmt.Errorf("pulsar: the broker refused sequence %d on %s: %w", seq, p.topic, se)
	if strings.Contains(strings.ToLower(se.Message), "size") {
		err = fmt.Errorf("%w: %w", ErrMessageTooLarge, err) // the topic's maxMessageSize
	}
	p.failItems([]*pendingItem{head}, err)
}

// fail stops the producer for good: every pending and future message fails with err.
func (p *partitionProducer) fail(err error) { p.failAfter(nil, err) }

// failAfter is fail, failing first the items taken off the queue already.
func (p *partitionProducer) failAfter(first []*pendingItem, err error) {
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		p.failItems(first, err)
		return
	}
	p.failed = err
	p.state = stateFailed
	cn := p.cn // set only when ready
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	items := append(first, p.takeAllLocked()...)
	p.mu.Unlock()
	if cn != nil {
		reqID := p.client.nextRequestID()
		_ = cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
			CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
	}
	p.log.Error("producer failed", "error", err)
	p.failItems(items, err)
}

// takeAllLocked removes the open batch and every pending item.
func (p *partitionProducer) takeAllLocked() []*pendingItem {
	items := p.pending
	p.pending = nil
	if len(p.batch.reqs) > 0 {
		items = append(items, &pendingItem{reqs: p.batch.reqs, numMsgs: len(p.batch.reqs), bytes: p.batch.acquired})
		p.batch = batch{}
	}
	close(p.progress)
	p.progress = make(chan struct{})
	return items
}

func (p *partitionProducer) failItems(items []*pendingItem, err error) {
	var fns []completion
	n, b := 0, 0
	for _, it := range items {
		n += it.numMsgs
		b += it.bytes
		for _, req := range it.reqs {
			fns = deliver(fns, req, MessageID{}, err)
		}
	}
	p.limiter.release(n, b)
	p.cbs.push(fns...)
}

func (p *partitionProducer) failTimedOut(now time.Time) {
	if p.opts.SendTimeout <= 0 {
		return
	}
	p.mu.Lock()
	var expired []*pendingItem
	for len(p.pending) > 0 && now.Sub(p.pending[0].created) > p.opts.SendTimeout {
		expired = append(expired, p.pending[0])
		p.popLocked()
	}
	p.mu.Unlock()
	if len(expired) == 0 {
		return
	}
	err := fmt.Errorf("%w: %s without a receipt from %s", ErrSendTimeout, p.opts.SendTimeout, p.topic)
	if p.opts.Deduplication {
		// Nothing queued behind a message that may be lost may reach the broker before it
		// is sent again: the broker would then drop the resent one as a duplicate.
		p.failAfter(expired, fmt.Errorf("%w; the producer stops, failing what was queued behind it", err))
		return
	}
	p.failItems(expired, err)
}

// stoppedLocked says why the producer stopped for good (failed or closed), or nil.
func (p *partitionProducer) stoppedLocked() error {
	if p.failed != nil {
		return p.failed
	}
	if p.closing {
		return ErrProducerClosed
	}
	return nil
}

// errLocked says why a send cannot be accepted now.
func (p *partitionProducer) errLocked() error {
	if p.failed != nil {
		return p.failed
	}
	if p.closing {
		return ErrProducerClosed
	}
	return p.quotaErr
}

// quotaRefusal applies a backlog quota refusal of the registration: with the
// producer_exception policy (ProducerBlockedQuotaExceededException) what is pending
// fails at once with the (temporary) error, and so do new sends until the producer is
// registered again; with producer_request_hold (ProducerBlockedQuotaExceededError)
// messages wait, subject to the send timeout. The producer keeps reconnecting either way.
func (p *partitionProducer) quotaRefusal(err error) {
	var se *ServerError
	if !errors.As(err, &se) || se.Code != ServerErrorCode(pb.ServerError_ProducerBlockedQuotaExceededException) {
		return
	}
	qerr := fmt.Errorf("pulsar: %s: the topic's backlog quota is exceeded; retry later: %w", p.topic, se)
	p.mu.Lock()
	if p.failed != nil || p.closing {
		p.mu.Unlock()
		return
	}
	p.quotaErr = qerr
	items := p.takeAllLocked()
	p.mu.Unlock()
	p.failItems(items, qerr)
}

func (p *partitionProducer) lock(ctx context.Context) error {
	select {
	case p.exclusive <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrProducerClosed
	}
}

func (p *partitionProducer) unlock() { <-p.exclusive }

// sendAsync queues m; cb (if not nil) runs on the dispatcher once the message is
// persisted or has failed. It blocks while the pending queue is full.
func (p *partitionProducer) sendAsync(ctx context.Context, m *ProducerMessage, cb func(MessageID, error), direct bool) {
	p.mu.Lock()
	maxSize, name := p.maxMsgSize, p.name
	p.mu.Unlock()
	overhead := messageOverhead(m, name) // once: it walks the properties
	if len(m.Payload)+overhead > maxSize {
		if p.opts.DisableChunking {
			p.complete(cb, direct, fmt.Errorf("%w: %d bytes and %d of metadata, the broker's limit is %d and chunking is off",
				ErrMessageTooLarge, len(m.Payload), overhead, maxSize))
			return
		}
		// Queued here and now, chunk by chunk (each copied into its frame), so the
		// caller's slice is not read after SendAsync returns and the message keeps its
		// place among the messages sent before and after it.
		req := sendRequest{callback: cb, direct: direct}
		err := p.queueChunks(ctx, m, nil, int64(len(m.Payload)), true, func(id MessageID, err error) {
			p.cbs.push(deliver(nil, req, id, err)...)
		})
		if err != nil {
			p.complete(cb, direct, err)
		}
		return
	}
	if err := p.lock(ctx); err != nil {
		p.complete(cb, direct, err)
		return
	}
	defer p.unlock()
	if err := p.limiter.acquire(ctx, 1, len(m.Payload), p.done); err != nil {
		p.complete(cb, direct, err)
		return
	}
	p.mu.Lock()
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		p.limiter.release(1, len(m.Payload))
		p.complete(cb, direct, err)
		return
	}
	seq, alone, err := p.nextSeqLocked(m)
	if err != nil {
		p.mu.Unlock()
		p.limiter.release(1, len(m.Payload))
		p.complete(cb, direct, err)
		return
	}
	req := sendRequest{callback: cb, direct: direct}
	if p.opts.DisableBatching || alone {
		if len(p.batch.reqs) > 0 {
			p.flushBatchLocked() // sequence ids leave in the order they came
		}
		p.enqueueSingleLocked(seq, m, req)
		p.mu.Unlock()
		return
	}
	if p.name != name {
		overhead = messageOverhead(m, p.name) // renamed by a reconnect meanwhile
	}
	if len(p.batch.reqs) > 0 && (p.batch.size()+len(m.Payload)+overhead > min(p.opts.BatchingMaxBytes, p.maxMsgSize-1024) ||
		(p.opts.BatchingByKey && m.Key != p.batch.key)) {
		p.flushBatchLocked()
	}
	if len(p.batch.reqs) == 0 {
		p.batch.key = m.Key
	} else if m.Key != p.batch.key {
		p.batch.mixed = true
	}
	if len(p.batch.reqs) == 0 {
		p.batch.firstSeq = seq
		p.batch.created = time.Now()
	}
	p.batch.lastSeq = seq
	if p.batch.buf == nil {
		// Size the buffer like the previous batch, so a busy producer fills it without
		// growing (copying) and an idle one does not hold 128 KiB per lone message.
		size := min(max(p.lastBatchBytes+p.lastBatchBytes/8, len(m.Payload)+256), p.opts.BatchingMaxBytes+len(m.Payload)+256)
		p.batch.buf = make([]byte, frameHeadroom, frameHeadroom+size)
		p.batch.reqs = make([]sendRequest, 0, min(max(p.lastBatchMsgs, 1), p.opts.BatchingMaxMessages))
	}
	p.batch.buf = appendSingleMessage(p.batch.buf, seq, m)
	p.batch.reqs = append(p.batch.reqs, req)
	p.batch.acquired += len(m.Payload)
	if len(p.batch.reqs) >= p.opts.BatchingMaxMessages || p.batch.size() >= p.opts.BatchingMaxBytes || len(p.pending) == 0 {
		p.flushBatchLocked()
	}
	p.mu.Unlock()
}

// nextSeqLocked chooses m's sequence id: the next one, or (Deduplication) the caller's.
// alone says the message must not share an entry: its id is not above every id the
// broker may already hold from this producer's name, and the broker judges a batch as
// a duplicate by its first id.
func (p *partitionProducer) nextSeqLocked(m *ProducerMessage) (seq uint64, alone bool, err error) {
	if !p.opts.Deduplication {
		if m.SequenceID != nil {
			return 0, false, fmt.Errorf("%w: %s: a SequenceID needs a producer with Deduplication", ErrSequence, p.topic)
		}
		seq = p.seq
		p.seq++
		return seq, false, nil
	}
	if m.SequenceID == nil || *m.SequenceID < 0 {
		return 0, false, fmt.Errorf("%w: %s: a producer with Deduplication needs a SequenceID from 0 to 2^63-1 on every message", ErrSequence, p.topic)
	}
	id := *m.SequenceID
	alone = id <= p.dedupFloor
	p.dedupFloor = max(p.dedupFloor, id)
	if uint64(id) >= p.seq {
		p.seq = uint64(id) + 1 // flush waits for everything below p.seq
	}
	return uint64(id), alone, nil
}

// complete reports a result for a message that never entered the queue.
func (p *partitionProducer) complete(cb func(MessageID, error), direct bool, err error) {
	p.cbs.push(deliver(nil, sendRequest{callback: cb, direct: direct}, MessageID{}, err)...)
}

func (p *partitionProducer) metadataLocked(seq uint64) *pb.MessageMetadata {
	return &pb.MessageMetadata{
		ProducerName:  proto.String(p.name),
		SequenceId:    proto.Uint64(seq),
		PublishTime:   proto.Uint64(uint64(time.Now().UnixMilli())),
		SchemaVersion: p.schemaVersion,
	}
}

func (p *partitionProducer) flushBatchLocked() {
	b := p.batch
	p.batch = batch{}
	p.lastBatchBytes = b.size()
	p.lastBatchMsgs = len(b.reqs)
	n := len(b.reqs)
	md := p.metadataLocked(b.firstSeq)
	md.NumMessagesInBatch = proto.Int32(int32(n))
	if n > 1 {
		md.HighestSequenceId = proto.Uint64(b.lastSeq)
	}
	if !b.mixed && b.key != "" {
		// One key for the whole entry: a Key_Shared subscription routes it by that key.
		md.PartitionKey = proto.String(b.key)
	}
	buf, headroom := p.compressLocked(md, b.buf[frameHeadroom:], b.buf)
	send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(b.firstSeq), NumMessages: proto.Int32(int32(n))}
	if n > 1 {
		send.HighestSequenceId = proto.Uint64(b.lastSeq)
	}
	p.appendItemLocked(&pendingItem{seq: b.firstSeq, highestSeq: b.lastSeq, reqs: b.reqs, batched: true,
		numMsgs: n, bytes: b.acquired, created: b.created}, send, md, buf, headroom)
}

// compressLocked returns the payload to send, raw or compressed, and how many unused
// bytes precede it in the returned buffer. framed, when not nil, is raw preceded by
// frameHeadroom bytes; the result then keeps that headroom for frame.PayloadInPlace.
func (p *partitionProducer) compressLocked(md *pb.MessageMetadata, raw, framed []byte) ([]byte, int) {
	// uncompressed_size is set even without compression, as the official producers do:
	// the official Go consumer relies on it to read a reassembled chunked message.
	md.UncompressedSize = proto.Uint32(uint32(len(raw)))
	headroom := 0
	if framed != nil {
		headroom = frameHeadroom
	}
	if p.opts.Compression == NoCompression {
		if framed != nil {
			return framed, headroom
		}
		return raw, 0
	}
	out, err := compress.Compress(p.opts.Compression.pb(), make([]byte, headroom, headroom+len(raw)/2+64), raw)
	if err != nil {
		p.log.Warn("compression failed; sending uncompressed", "error", err)
		if framed != nil {
			return framed, headroom
		}
		return raw, 0
	}
	md.Compression = p.opts.Compression.pb().Enum()
	return out, headroom
}

func (p *partitionProducer) enqueueSingleLocked(seq uint64, m *ProducerMessage, req sendRequest) {
	md := p.metadataLocked(seq)
	setMessageFields(md, m)
	payload, headroom := p.compressLocked(md, m.Payload, nil)
	send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq)}
	p.appendItemLocked(&pendingItem{seq: seq, highestSeq: seq, reqs: []sendRequest{req}, numMsgs: 1, bytes: len(m.Payload), created: time.Now()}, send, md, payload, headroom)
}

func setMessageFields(md *pb.MessageMetadata, m *ProducerMessage) {
	if m.Key != "" {
		md.PartitionKey = proto.String(m.Key)
	}
	if len(m.OrderingKey) > 0 {
		md.OrderingKey = m.OrderingKey
	}
	if !m.EventTime.IsZero() {
		md.EventTime = proto.Uint64(uint64(m.EventTime.UnixMilli()))
	}
	if len(m.Properties) > 0 || m.Extra.Key != "" {
		var few [8]property
		kvs := sortedProperties(few[:0], m.Properties, m.Extra.Key)
		md.Properties = make([]*pb.KeyValue, 0, len(kvs)+1)
		pending := m.Extra.Key != ""
		extra := func() {
			// A copy: the caller may reuse Value once the call returns.
			md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(m.Extra.Key), Value: proto.String(string(m.Extra.Value))})
			pending = false
		}
		for _, kv := range kvs {
			if pending && m.Extra.Key < kv.key {
				extra()
			}
			md.Properties = append(md.Properties, &pb.KeyValue{Key: proto.String(kv.key), Value: proto.String(kv.value)})
		}
		if pending {
			extra()
		}
	}
}

// appendItemLocked frames the payload held at buf[headroom:] (in place when the
// headroom allows) and queues it.
func (p *partitionProducer) appendItemLocked(it *pendingItem, send *pb.CommandSend, md *pb.MessageMetadata, buf []byte, headroom int) {
	mdBytes, err := proto.Marshal(md)
	if err == nil {
		// The broker closes a connection that carries a frame above its limit: check
		// the encoded frame, metadata included, before it is queued.
		it.frame, err = frame.PayloadInPlace(buf, headroom, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: send}, mdBytes, p.maxMsgSize+frame.Padding)
	}
	if errors.Is(err, frame.ErrTooLarge) {
		p.failItemsLocked(it, fmt.Errorf("%w: %s: %w", ErrMessageTooLarge, p.topic, err))
		return
	}
	if err != nil {
		p.failItemsLocked(it, fmt.Errorf("pulsar: encoding a message for %s: %w", p.topic, err))
		return
	}
	p.pending = append(p.pending, it)
	if p.cn != nil {
		_ = p.cn.SendFrame(it.frame) // on failure the reconnect resends it
	}
}

func (p *partitionProducer) failItemsLocked(it *pendingItem, err error) {
	go p.failItems([]*pendingItem{it}, err)
}

// sendChunked publishes one message of size bytes as chunks, reading the payload from r
// (or m.Payload when r is nil) one chunk at a time.
// chunkWindow is how many chunks of one message may await receipts at once.
const chunkWindow = 2

func (p *partitionProducer) sendChunked(ctx context.Context, m *ProducerMessage, r io.Reader, size int64) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	done := make(chan result, 1)
	if err := p.queueChunks(ctx, m, r, size, false, func(id MessageID, err error) { done <- result{id, err} }); err != nil {
		return MessageID{}, err
	}
	select {
	case res := <-done:
		return res.id, res.err
	case <-ctx.Done():
		// The message stays queued; its outcome is no longer reported to this caller.
		return MessageID{}, ctx.Err()
	}
}

// queueChunks queues one message of size bytes as chunks, read from r (or m.Payload
// when r is nil). With all, every chunk is queued before it returns (bounded by the
// pending limits), so m.Payload is not read afterwards; otherwise at most chunkWindow
// chunks await receipts at once, so a streamed message of any size costs two chunk
// buffers. done runs exactly once, with the last chunk's outcome, unless queueChunks
// returns an error (then it never runs). done must not block.
func (p *partitionProducer) queueChunks(ctx context.Context, m *ProducerMessage, r io.Reader, size int64, all bool, done func(MessageID, error)) error {
	if size > p.opts.MaxChunkedMessageSize {
		return fmt.Errorf("%w: %d bytes, MaxChunkedMessageSize is %d", ErrMessageTooLarge, size, p.opts.MaxChunkedMessageSize)
	}
	var compressedFrom []byte
	uncompressed := size
	if r == nil {
		payload := m.Payload
		if p.opts.Compression != NoCompression {
			c, err := compress.Compress(p.opts.Compression.pb(), nil, m.Payload)
			if err == nil {
				compressedFrom, payload = m.Payload, c
			}
		}
		r = byteReader(payload)
		size = int64(len(payload))
	}
	// total_chunk_msg_size is an int32 and uncompressed_size a uint32 on the wire: a
	// larger message would be announced truncated, so consumers would misassemble it.
	if size > math.MaxInt32 || uncompressed > math.MaxUint32 {
		return fmt.Errorf("%w: %d bytes, the protocol's chunked message size field holds at most %d", ErrMessageTooLarge, max(size, uncompressed), math.MaxInt32)
	}
	if err := p.lock(ctx); err != nil {
		return err
	}
	locked := true
	release := func() {
		if locked {
			locked = false
			p.unlock()
		}
	}
	defer release()
	p.mu.Lock()
	if err := p.errLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	// Each chunk carries the message's metadata again: size chunks from it, so that
	// every frame fits the broker's limit whatever the properties weigh.
	overhead := messageOverhead(m, p.name) + chunkFieldsRoom(p.name)
	room := p.maxMsgSize - overhead
	if room < 1024 {
		p.mu.Unlock()
		return fmt.Errorf("%w: the metadata (%d bytes with key and properties) leaves no room for a chunk under the broker's limit of %d",
			ErrMessageTooLarge, overhead, p.maxMsgSize)
	}
	chunkSize := p.opts.ChunkSize
	if chunkSize == 0 || chunkSize > room {
		chunkSize = room
	}
	seq, _, err := p.nextSeqLocked(m) // a chunk is always an entry of its own
	if err != nil {
		p.mu.Unlock()
		return err
	}
	// Whatever is in the open batch goes first, so sequence ids stay in order.
	if len(p.batch.reqs) > 0 {
		p.flushBatchLocked()
	}
	uuid := fmt.Sprintf("%s-%d", p.name, seq)
	p.mu.Unlock()

	numChunks := int((size + int64(chunkSize) - 1) / int64(chunkSize))
	if numChunks == 0 {
		numChunks = 1
	}
	// A streamed message has at most chunkWindow chunks awaiting their receipts, so a
	// message of any size costs chunkWindow chunk buffers. A buffer is reused once its
	// chunk is persisted (after a failure it may still be queued for writing, so it is
	// dropped instead).
	windowSize := chunkWindow
	if all {
		windowSize = numChunks
	}
	window := make(chan struct{}, windowSize)
	free := make(chan []byte, chunkWindow)
	for i := range numChunks {
		n := int(min(int64(chunkSize), size-int64(i)*int64(chunkSize)))
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return ErrProducerClosed
		}
		if err := p.limiter.acquire(ctx, 1, n, p.done); err != nil {
			return err
		}
		var buf []byte
		select {
		case buf = <-free:
			buf = buf[:frameHeadroom+n]
		default:
			buf = make([]byte, frameHeadroom+n, frameHeadroom+chunkSize) // read in place behind the frame header's room
		}
		if _, err := io.ReadFull(r, buf[frameHeadroom:]); err != nil {
			p.limiter.release(1, n)
			return fmt.Errorf("pulsar: reading chunk %d of %d for %s: %w (the chunks already sent expire at consumers)", i, numChunks, p.topic, err)
		}
		p.mu.Lock()
		if err := p.errLocked(); err != nil {
			p.mu.Unlock()
			p.limiter.release(1, n)
			return err
		}
		md := p.metadataLocked(seq)
		setMessageFields(md, m)
		md.Uuid = proto.String(uuid)
		md.NumChunksFromMsg = proto.Int32(int32(numChunks))
		md.TotalChunkMsgSize = proto.Int32(int32(size))
		md.ChunkId = proto.Int32(int32(i))
		// Set even when uncompressed: the official Go consumer needs it to use the
		// reassembled payload rather than the last chunk's.
		md.UncompressedSize = proto.Uint32(uint32(uncompressed))
		if compressedFrom != nil {
			md.Compression = p.opts.Compression.pb().Enum()
		}
		// Each chunk's send timeout runs from when its bytes were read, not from the
		// first chunk: an upload slower than the timeout is fine while every chunk is
		// persisted in time.
		it := &pendingItem{seq: seq, highestSeq: seq, numMsgs: 1, bytes: n, created: time.Now()}
		last := i == numChunks-1
		chunkBuf := buf
		it.reqs = []sendRequest{{direct: true, callback: func(mid MessageID, err error) {
			if err == nil {
				select {
				case free <- chunkBuf:
				default:
				}
			}
			<-window
			if last {
				done(mid, err)
			}
		}}}
		send := &pb.CommandSend{ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(seq), IsChunk: proto.Bool(true)}
		p.appendItemLocked(it, send, md, buf, frameHeadroom)
		p.mu.Unlock()
	}
	release() // every chunk is queued: other messages may follow
	return nil
}

type sliceReader struct{ b []byte }

func byteReader(b []byte) io.Reader { return &sliceReader{b} }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// flush sends the open batch and waits until everything queued so far is settled.
func (p *partitionProducer) flush(ctx context.Context) error {
	p.mu.Lock()
	if len(p.batch.reqs) > 0 {
		p.flushBatchLocked()
	}
	target := p.seq
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if len(p.pending) == 0 || p.pending[0].seq >= target {
			err := p.failed
			p.mu.Unlock()
			return err
		}
		ch := p.progress
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close flushes (bounded by ctx), closes the producer on the broker, fails what is
// left with ErrProducerClosed and stops the goroutines.
func (p *partitionProducer) close(ctx context.Context) {
	_ = p.flush(ctx)
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	p.closing = true
	p.state = stateClosed
	cn := p.cn // set only when ready
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	items := p.takeAllLocked()
	p.mu.Unlock()
	if cn != nil {
		reqID := p.client.nextRequestID()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _ = cn.Request(cctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
			CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
		cancel()
	}
	close(p.done)
	p.wg.Wait()
	p.failItems(items, ErrProducerClosed)
	p.cbs.close()
}
