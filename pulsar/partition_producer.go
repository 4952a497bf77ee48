package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

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
	pendingMsgs   int // the messages of pending's items (an item counts at least one)
	batch         batch
	header        batchHeader // a batch's metadata and command while it is framed
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
	progress   chan struct{} // made by a flush that waits; closed and dropped when pending shrinks
	// drain is set while the connection is read to its end after a refusal that resets
	// it (see drain).
	drain      *drain
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
	p.stopDrainLocked()
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
	// without a receipt; not what is settled already (stored, or failed for good), which
	// waits only for the items ahead of it.
	resent := 0
	for _, it := range p.pending {
		if it.settled {
			continue
		}
		if err := cn.SendFrame(it.frame); err != nil {
			break // the new connection died too; its close schedules another attempt
		}
		resent++
	}
	// A batch held while the previous connection was drained after a refusal (or while
	// entries now settled filled the window) leaves now if the window has room, not one
	// round trip later with the first resent entry's receipt.
	p.flushIfRoomLocked()
	if !first {
		// Counted with the resends, in the step that makes the producer ready: the
		// receipts for what was resent can reach the application before reconnect()
		// would take the lock again, and Stats must not show the resends without the
		// reconnect that made them.
		p.reconnects++
		p.resent += resent
		p.log.Info("producer reconnected", "broker", bc.logical, "resent", resent)
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
		if permanentRegistrationError(err, false) || p.opts.FailWhenNameBusy && nameBusy(err) {
			p.failReconnecting(fmt.Errorf("%w: %w", ErrProducerFailed, err))
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
	var settled settledItems
	defer func() {
		p.mu.Unlock()
		p.completeSettled(settled)
	}()
	if p.reg != h {
		return // an older registration's connection
	}
	if p.drain != nil {
		// Closed while it was drained after a refusal: what was answered is placed,
		// what was not is resent, as after any lost connection.
		settled = p.endDrainLocked()
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
