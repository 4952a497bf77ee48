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

// partitionConsumer consumes one partition (or non-partitioned topic) of a Consumer.
type partitionConsumer struct {
	c         *Consumer
	client    *Client
	topic     string
	partition int32
	opts      ConsumerOptions
	id        uint64
	log       *slog.Logger

	earliest bool // a partition added at runtime: a new subscription starts at its earliest message
	// noCreate: a pattern's topic, subscribed without creating it (force_topic_creation
	// false), so a deleted topic is not brought back by the consumer's reconnection.
	noCreate bool

	mu sync.Mutex
	// state, reg and cn are the registration's state machine (see regState).
	state          regState
	reg            *consumerHandle
	cn             *conn.Conn // set only when ready
	readyAt        time.Time
	progressed     bool // a message arrived since the registration became ready
	attempts       int  // failed attempts since the last stable registration
	permitsTaken   int  // permits the application (or a discard) freed since the last FLOW
	permitsGranted int
	// With ReceiverQueueBytes: the bytes of this partition's messages queued and not yet
	// taken, the permits granted and not yet used by an arrival, and the most bytes an
	// arrival brought per permit lately (a decaying maximum, 0 until the first one; see
	// permitBytesLocked).
	heldBytes      int
	inFlight       int
	bytesPerPermit int
	gen            uint64 // the registration's generation: a message of an older one frees nothing
	// With a MemoryLimiter: the bytes reserved from it for the permits in flight, and
	// when they were last reserved or an arrival used some (see releaseIdleLocked).
	reserved         int
	reservedAt       time.Time
	chunks           map[string]*chunkCtx
	chunkBytes       int // payload bytes held by chunks, bounded by MaxChunkedMessageSize (and charged to the MemoryLimiter)
	chunkOrder       []string
	midChunk         bool // the last entry that landed was a non-final chunk
	trackers         map[entryKey]*batchTracker
	acks             map[entryKey]*pb.MessageIdData // grouped individual acks
	nacks            map[entryKey]*pendingNack
	expiredAt        time.Time // the last look for trackers handed back long ago
	ended            bool
	closing          bool
	reconnects       int
	discarded        int
	checksumFailures int
	malformed        int
	chunkedDropped   int // incomplete chunked messages dropped (their chunks acknowledged)
	undecodable      [numReasons]int
	undecodableLog   reasonLog
	halted           bool // an encrypted message stopped the partition (CryptoFail)
	// parked: entries kept as stored until the MemoryLimiter has room for what they
	// decompress to, in arrival order; drain is the goroutine delivering them (see
	// partition_consumer_park.go).
	parked []*parkedFrame
	drain  *drainer
	seekSt seekState // see consumer_seek.go

	reconnectCh chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

func newPartitionConsumer(c *Consumer, topic string, partition int32) *partitionConsumer {
	return &partitionConsumer{
		c: c, client: c.client, topic: topic, partition: partition, opts: c.opts,
		id:          c.client.consumerID.Add(1),
		log:         c.client.log.With("topic", topic, "subscription", c.opts.Subscription),
		chunks:      map[string]*chunkCtx{},
		trackers:    map[entryKey]*batchTracker{},
		acks:        map[entryKey]*pb.MessageIdData{},
		nacks:       map[entryKey]*pendingNack{},
		reconnectCh: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
}

func (p *partitionConsumer) start(ctx context.Context) error {
	// A connection that closed right after the broker accepted us is a race, and a
	// broker whose metadata is moving refuses for moments: both are tried again, not
	// reported as the creation's failure.
	if err := creationRetry(ctx, p.c.client.closing, p.c.opts.Backoff, func() error { return p.connect(ctx, true) }); err != nil {
		return err
	}
	p.wg.Add(1)
	go p.run()
	return nil
}

// consumerHandle routes one registration's frames to the partition consumer; see
// handle (the producer's) for why every attempt has its own.
type consumerHandle struct {
	p    *partitionConsumer
	cn   *conn.Conn
	lost error // set (under p.mu) when the connection closed while subscribing
}

func (h *consumerHandle) HandleMessage(cmd *pb.CommandMessage, f *frame.Frame, frameErr error) {
	h.p.message(h, cmd, f, frameErr)
}
func (h *consumerHandle) HandleEndOfTopic() { h.p.endOfTopic() }
func (h *consumerHandle) HandleActiveChange(active bool) {
	if f := h.p.opts.OnActiveChange; f != nil {
		topic := h.p.topic
		h.p.c.events.push(completion{cb: func(MessageID, error) { f(topic, active) }})
	}
}
func (h *consumerHandle) HandleClose(reason error) { h.p.connectionLost(h, reason) }

// detachLocked forgets h as the current registration and unregisters it from its connection.
func (p *partitionConsumer) detachLocked(h *consumerHandle) {
	if p.reg != h {
		return
	}
	p.reg = nil
	p.cn = nil
	h.cn.RemoveConsumer(p.id)
}

func (p *partitionConsumer) connect(ctx context.Context, first bool) error {
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
	h := &consumerHandle{p: p, cn: cn}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrConsumerClosed
	}
	if err := cn.AddConsumer(p.id, h); err != nil {
		p.mu.Unlock()
		return err
	}
	p.reg, p.state = h, stateRegistering
	p.mu.Unlock()
	reqID := p.client.nextRequestID()
	sub := &pb.CommandSubscribe{
		Topic:           proto.String(p.topic),
		Subscription:    proto.String(p.opts.Subscription),
		SubType:         p.opts.Type.pb().Enum(),
		ConsumerId:      proto.Uint64(p.id),
		RequestId:       proto.Uint64(reqID),
		InitialPosition: pb.CommandSubscribe_Latest.Enum(),
		Durable:         proto.Bool(true),
	}
	if p.opts.InitialPosition == Earliest || p.earliest {
		sub.InitialPosition = pb.CommandSubscribe_Earliest.Enum()
	}
	if p.noCreate {
		sub.ForceTopicCreation = proto.Bool(false)
	}
	if p.opts.Name != "" {
		sub.ConsumerName = proto.String(p.opts.Name)
	}
	if p.opts.Type == KeyShared {
		sub.KeySharedMeta = &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_AUTO_SPLIT.Enum()}
	}
	_, err = cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: sub})
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && h.lost != nil {
		// Subscribed, but the connection closed before we could record it: a failed
		// attempt, retried on a new connection.
		err = fmt.Errorf("%w: %w", errLostWhileRegistering, h.lost)
	}
	if err == nil && p.reg != h {
		err = errLostWhileRegistering
	}
	if err != nil {
		p.detachLocked(h)
		if p.closing {
			return ErrConsumerClosed
		}
		if p.state == stateRegistering {
			p.state = stateReconnecting
		}
		return fmt.Errorf("pulsar: subscribing %q to %s: %w", p.opts.Subscription, p.topic, err)
	}
	if p.closing {
		p.detachLocked(h)
		return ErrConsumerClosed
	}
	p.cn = cn
	p.state = stateReady
	if !first {
		// Counted in the step that makes the consumer ready: its messages can reach
		// the application before reconnect() would take the lock again.
		p.reconnects++
	}
	p.readyAt = time.Now()
	p.progressed = false
	p.permitsTaken = 0
	p.gen++
	// What was acknowledged while the registration was lost goes first, so the broker
	// does not redeliver it on the permits below.
	p.flushAcksLocked()
	// A fresh subscription: the whole window is open again (in bytes: as much of it as
	// the byte bound and the limiter allow; the queue of the last one was emptied on its
	// loss, and the permits in flight there are void).
	if p.byteMode() {
		p.unreserveLocked()
		p.heldBytes, p.inFlight, p.permitsTaken = 0, 0, p.opts.ReceiverQueueSize
		p.grantLocked()
	} else {
		p.flowLocked(p.opts.ReceiverQueueSize)
	}
	return nil
}

func (p *partitionConsumer) endOfTopic() {
	p.mu.Lock()
	already := p.ended
	p.ended = true
	p.mu.Unlock()
	if !already {
		p.c.partitionEnded()
	}
}

func (p *partitionConsumer) connectionLost(h *consumerHandle, reason error) {
	p.mu.Lock()
	if p.reg != h {
		p.mu.Unlock()
		return // an older registration's connection
	}
	if p.state == stateRegistering {
		h.lost = reason // connect fails the attempt and retries
		p.mu.Unlock()
		return
	}
	p.detachLocked(h)
	if p.state != stateReady {
		p.mu.Unlock()
		return
	}
	p.state = stateReconnecting
	if p.progressed || time.Since(p.readyAt) >= stableAfter(p.opts.Backoff) {
		p.attempts = 0
	} else {
		p.attempts++
	}
	// Whatever was buffered or half reassembled comes again on the next subscription;
	// the permits in flight went with the connection.
	p.dropAllChunksLocked()
	p.dropParkedLocked()
	p.unreserveLocked()
	// Every unacknowledged entry is delivered again (on a shared subscription perhaps to
	// another consumer): its batch tracker goes, or it would stay for ever.
	p.trackers = map[entryKey]*batchTracker{}
	p.mu.Unlock()
	p.c.removeFrom(p)
	p.log.Warn("consumer disconnected; resubscribing", "reason", reason)
	select {
	case p.reconnectCh <- struct{}{}:
	default:
	}
}

func (p *partitionConsumer) run() {
	defer p.wg.Done()
	tick := p.opts.AckGroupTime
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.reconnectCh:
			p.reconnect()
		case now := <-ticker.C:
			p.mu.Lock()
			p.flushAcksLocked()
			p.redeliverDueLocked(now)
			p.expireHandedBackLocked(now)
			p.releaseIdleLocked(now)
			p.undecodableLog.flush(p.log, now)
			p.wakeDrainLocked() // room may have come, or the application settled what it held
			reassembling := len(p.chunkOrder) > 0
			for len(p.chunkOrder) > 0 && now.Sub(p.chunks[p.chunkOrder[0]].created) > p.opts.ChunkExpiry {
				p.dropChunksLocked(p.chunkOrder[0], "expired")
			}
			if p.byteMode() && (reassembling || p.starvedLocked()) {
				// A partition reassembling messages, or left without permits while the
				// application holds what it took (see Consumer.Settled), waits for room
				// with nothing queued, so no message taken grants its permits again: the
				// budget may have room now, or the expiry above left it idle. (Only
				// then: a quiet partition's withheld permits wait for its messages to be
				// taken, or a grant on every tick would take the room others wait for,
				// see reservationIdle.)
				p.grantLocked()
			}
			p.mu.Unlock()
		}
	}
}

func (p *partitionConsumer) reconnect() {
	for {
		p.mu.Lock()
		stop := p.state != stateReconnecting
		attempts := p.attempts
		p.mu.Unlock()
		if stop {
			return
		}
		if attempts > 0 {
			t := time.NewTimer(p.opts.Backoff.delay(attempts - 1))
			select {
			case <-p.done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		ctx, cancel := contextUntil(p.done)
		err := p.connect(ctx, false)
		cancel()
		if err == nil {
			p.log.Info("consumer resubscribed")
			return // counted by connect, when it made the consumer ready
		}
		p.mu.Lock()
		p.attempts++
		attempts = p.attempts
		p.mu.Unlock()
		if permanentRegistrationError(err, true) {
			p.fail(err)
			return
		}
		p.log.Warn("resubscribe failed", "attempt", attempts, "error", err)
	}
}

// fail stops the partition consumer for good after a permanent refusal: the consumer's
// Receive returns ErrConsumerFailed (wrapping err) once the messages already queued are taken.
func (p *partitionConsumer) fail(err error) {
	p.mu.Lock()
	if p.closing || p.state == stateFailed {
		p.mu.Unlock()
		return
	}
	p.state = stateFailed
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	p.unreserveLocked()
	p.dropAllChunksLocked()
	p.dropParkedLocked()
	p.mu.Unlock()
	if d := p.c.discovery; d != nil && topicNotFound(err) {
		// A pattern's topic that was deleted: its consumer goes, the others carry on.
		p.log.Info("topic gone; its consumer closes", "error", err)
		d.topicGone(p.baseTopic())
		return
	}
	p.log.Error("consumer failed", "error", err)
	p.c.partitionFailed(fmt.Errorf("%w: %s: %w", ErrConsumerFailed, p.topic, err))
}

func (p *partitionConsumer) close(ctx context.Context) {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	p.flushAcksLocked()
	p.closing = true
	p.state = stateClosed
	p.unreserveLocked()
	p.dropAllChunksLocked()
	p.dropParkedLocked()
	cn := p.cn // set only when ready
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	p.mu.Unlock()
	if cn != nil {
		reqID := p.client.nextRequestID()
		_, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(),
			CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
		if err != nil && !errors.Is(err, ErrConnectionClosed) {
			p.log.Warn("closing the consumer on the broker", "error", err)
		}
	}
	close(p.done)
	p.wg.Wait()
}
