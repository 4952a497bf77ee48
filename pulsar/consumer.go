package pulsar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// ErrEndOfTopic: every topic of the consumer was terminated and all its messages were received.
var ErrEndOfTopic = errors.New("pulsar: reached the end of the topic")

// ErrAckDeferred: AckSync of a message whose batch still has unacknowledged messages,
// with BatchIndexAck off. The acknowledgement is recorded and reaches the broker with
// the batch's last one; until then a redelivery may bring the message again.
var ErrAckDeferred = errors.New("pulsar: acknowledgement deferred until the rest of the batch is acknowledged (enable BatchIndexAck)")

// ErrConsumerClosed: the consumer was closed.
var ErrConsumerClosed = errors.New("pulsar: consumer closed")

// ErrConsumerFailed: the broker refused to (re)subscribe for a reason retrying cannot
// cure (authorization, topic or subscription not found, ...). Receive returns it, wrapping
// the *ServerError, once the messages already received are taken; the consumer is done.
var ErrConsumerFailed = errors.New("pulsar: consumer failed")

// Consumer receives from one subscription on one or more topics (and their partitions).
// Messages of one partition arrive in order; flow permits are granted as the
// application takes messages, so at most ReceiverQueueSize messages per partition wait
// in memory.
type Consumer struct {
	client *Client
	opts   ConsumerOptions
	parts  []*partitionConsumer
	events *dispatcher // OnActiveChange callbacks, off the connection's reader

	// partitioned is each partitioned topic's partition count, for watchPartitions;
	// topicsMu guards it (a pattern's discovery adds and removes topics).
	topicsMu    sync.Mutex
	partitioned map[string]int
	// growMu makes one growth of a topic at a time: a pattern's discovery and the
	// partition refresh may both find the same partitions added.
	growMu sync.Mutex
	// discovery, for a TopicsPattern, finds the topics to consume as they come and go.
	discovery *discovery
	stop      chan struct{} // ends watchPartitions
	wg        sync.WaitGroup

	// unsettled counts the messages taken with KeepMemoryCharge whose charge the
	// application has not given back (Settled).
	unsettled atomic.Int64

	seekMu sync.Mutex // one seek at a time

	mu     sync.Mutex
	queue  []*Message
	head   int
	ended  int
	failed error // the first partition's permanent failure
	// stopIn, when not negative, is how many queued messages are still delivered
	// before the consumer stops (an encrypted message stopped a partition: CryptoFail);
	// what other partitions queue after it is not, so Receive reports it promptly.
	stopIn int
	closed bool
	avail  chan struct{}
	done   chan struct{}
	once   sync.Once
	// cut ends a Close's wait for the broker's answers (Client.CloseContext's ctx ended).
	cut    context.Context
	cutNow context.CancelFunc
}

// Subscribe creates the subscription if needed and starts consuming; it returns once
// every partition's consumer is subscribed (or the first error).
func (c *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	cons := &Consumer{client: c, opts: opts, avail: make(chan struct{}, 1), done: make(chan struct{}), events: newDispatcher(),
		partitioned: map[string]int{}, stop: make(chan struct{}), stopIn: -1}
	cons.cut, cons.cutNow = context.WithCancel(context.Background())
	if opts.TopicsPattern != nil {
		return c.subscribePattern(ctx, cons)
	}
	for _, name := range opts.Topics {
		topic, err := TopicName(name)
		if err != nil {
			cons.Close()
			return nil, err
		}
		n, err := c.partitions(ctx, topic, opts.Backoff)
		if err != nil {
			cons.Close()
			return nil, err
		}
		if n == 0 {
			cons.parts = append(cons.parts, newPartitionConsumer(cons, topic, -1))
			continue
		}
		cons.partitioned[topic] = n
		for i := range n {
			cons.parts = append(cons.parts, newPartitionConsumer(cons, partitionName(topic, i), int32(i)))
		}
	}
	for _, pc := range cons.parts {
		if err := pc.start(ctx); err != nil {
			cons.Close()
			return nil, err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cons.Close()
		return nil, ErrClientClosed
	}
	c.consumers[cons] = struct{}{}
	c.mu.Unlock()
	if err := cons.seekAtStart(ctx); err != nil {
		cons.Close()
		return nil, err
	}
	if len(cons.partitioned) > 0 && opts.PartitionsRefreshInterval > 0 {
		cons.wg.Add(1)
		go cons.watchPartitions()
	}
	return cons, nil
}

// partitions returns the partition consumers (the slice only grows, under c.mu).
func (c *Consumer) partitions() []*partitionConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parts
}

// watchPartitions re-reads every partitioned topic's partition count each
// PartitionsRefreshInterval and subscribes to the partitions added at runtime.
func (c *Consumer) watchPartitions() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.PartitionsRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.topicsMu.Lock()
			known := maps.Clone(c.partitioned)
			c.topicsMu.Unlock()
			for topic, k := range known {
				c.growTo(topic, k)
			}
		}
	}
}

// growTo subscribes to topic's partitions beyond known and records how many are now
// consumed, unless the topic was removed meanwhile (a pattern no longer matches it).
func (c *Consumer) growTo(topic string, known int) {
	c.growMu.Lock()
	defer c.growMu.Unlock()
	c.topicsMu.Lock()
	cur, ok := c.partitioned[topic]
	c.topicsMu.Unlock()
	if !ok {
		return // removed meanwhile
	}
	known = max(known, cur) // grown meanwhile by the other
	n := c.grow(topic, known)
	if n <= known {
		return
	}
	c.topicsMu.Lock()
	if cur, ok := c.partitioned[topic]; ok && cur < n {
		c.partitioned[topic] = n
	}
	c.topicsMu.Unlock()
}

// grow subscribes to topic's partitions beyond known, from their earliest message; it
// returns how many partitions are now consumed (a failure is retried at the next refresh).
func (c *Consumer) grow(topic string, known int) int {
	ctx, cancel := contextUntil(c.stop)
	defer cancel()
	ctx, cancelOp := context.WithTimeout(ctx, c.client.opts.OperationTimeout)
	defer cancelOp()
	n, err := c.client.partitions(ctx, topic, c.opts.Backoff)
	if err != nil {
		c.client.log.Warn("re-reading the partitions failed", "topic", topic, "error", err)
		return known
	}
	for i := known; i < n; i++ {
		pc := newPartitionConsumer(c, partitionName(topic, i), int32(i))
		pc.earliest = true // its messages so far were published for this consumer too
		pc.noCreate = c.discovery != nil
		if err := pc.start(ctx); err != nil {
			c.client.log.Warn("subscribing to a new partition failed; retrying at the next refresh", "topic", topic, "partition", i, "error", err)
			return i
		}
		c.mu.Lock()
		c.topicsMu.Lock()
		_, still := c.partitioned[topic]
		c.topicsMu.Unlock()
		if c.closed || !still {
			c.mu.Unlock()
			pc.close(context.Background())
			return i
		}
		c.parts = append(c.parts, pc)
		c.mu.Unlock()
		c.client.log.Info("subscribed to a new partition", "topic", topic, "partition", i)
	}
	return n
}

// enqueue hands messages to the application; it never blocks (flow permits bound it).
func (c *Consumer) enqueue(msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	if enqueueHook != nil {
		enqueueHook()
	}
	c.mu.Lock()
	if c.closed {
		c.uncharge(msgs) // Close returned the queue's charge: these are not counted either
	}
	c.queue = append(c.queue, msgs...)
	c.mu.Unlock()
	c.signal()
}

// uncharge returns the MemoryLimiter charge of messages leaving the queue (taken by the
// application or dropped); a message's charge goes back once.
func (c *Consumer) uncharge(msgs []*Message) {
	lim := c.opts.MemoryLimiter
	if lim == nil {
		return
	}
	var n int64
	for _, m := range msgs {
		n += int64(m.charged)
		m.charged = 0
	}
	if n > 0 {
		lim.Release(n)
	}
}

func (c *Consumer) signal() {
	select {
	case c.avail <- struct{}{}:
	default:
	}
}

// enqueueHook, set by tests only, runs as messages are about to be queued.
var enqueueHook func()

// removeFrom drops the queued messages of one partition consumer (after a reconnect or
// a redelivery of everything) and returns how many permits and bytes (of the current
// registration) they stood for.
func (c *Consumer) removeFrom(pc *partitionConsumer) (permits, bytes int) {
	pc.mu.Lock()
	gen := pc.gen
	pc.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.queue[:c.head]
	var charged int64
	for _, m := range c.queue[c.head:] {
		if m.pc == pc {
			permits += m.permits
			if m.gen == gen {
				bytes += m.size
			}
			charged += int64(m.charged)
			m.charged = 0
			continue
		}
		kept = append(kept, m)
	}
	if charged > 0 {
		c.opts.MemoryLimiter.Release(charged)
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	c.stopIn = min(c.stopIn, len(c.queue)-c.head)
	return permits, bytes
}

func (c *Consumer) partitionFailed(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
		if errors.Is(err, ErrUndecodable) {
			c.stopIn = len(c.queue) - c.head
		}
	}
	c.mu.Unlock()
	c.signal()
}

func (c *Consumer) partitionEnded() {
	c.mu.Lock()
	c.ended++
	c.mu.Unlock()
	c.signal()
}

// TryReceive returns a queued message without waiting.
func (c *Consumer) TryReceive() (*Message, bool) {
	c.mu.Lock()
	if c.head == len(c.queue) || c.stopIn == 0 {
		c.mu.Unlock()
		return nil, false
	}
	if c.stopIn > 0 {
		c.stopIn--
	}
	m := c.queue[c.head]
	c.queue[c.head] = nil
	c.head++
	if c.head == len(c.queue) {
		c.queue, c.head = c.queue[:0], 0
	}
	charged := m.charged
	if c.opts.KeepMemoryCharge {
		// The application owns the charge now (Message.MemoryCharge): no window in
		// which its bytes are counted nowhere.
		m.handedCharge, m.charged = m.charged, 0
		charged = 0
		m.owner = c
		c.unsettled.Add(1) // before taken(m) grants: no permit beyond the limiter for it
	}
	m.charged = 0
	c.mu.Unlock()
	if charged > 0 {
		// Released before the permits return, so they can be granted from it.
		c.opts.MemoryLimiter.Release(int64(charged))
	}
	m.pc.taken(m)
	return m, true
}

// Settled gives back the MemoryLimiter charge of m, a message taken with
// KeepMemoryCharge (Message.MemoryCharge: released here), once the application is done
// with it; a second call for the same message does nothing.
//
// While a taken message is unsettled, a partition holding nothing is granted permits
// only as far as the limiter covers them, not the one permit beyond it that otherwise
// keeps a partition flowing through a budget others spent: taken and held, each such
// message would let the partition go beyond the limit again, without bound. Once
// nothing taken is unsettled, a partition left without permits gets that permit at once
// (and one waiting for room gets its permits as room comes, checked every tick).
func (c *Consumer) Settled(m *Message) {
	if m == nil || m.owner != c || !atomic.CompareAndSwapUint32(&m.settled, 0, 1) {
		return
	}
	if n := m.handedCharge; n > 0 && c.opts.MemoryLimiter != nil {
		c.opts.MemoryLimiter.Release(int64(n))
	}
	if c.unsettled.Add(-1) == 0 {
		for _, pc := range c.partitions() {
			pc.mu.Lock()
			if pc.byteMode() && pc.starvedLocked() {
				pc.grantLocked()
			}
			pc.mu.Unlock()
		}
	}
}

// holding reports whether the application holds a message taken with KeepMemoryCharge
// and not yet Settled.
func (c *Consumer) holding() bool { return c.unsettled.Load() > 0 }

// Receive waits for the next message. It returns ErrEndOfTopic once every topic was
// terminated and drained, ErrConsumerFailed (wrapping the broker's error) once a
// partition was refused for good and the queue is drained, an *UndecodableError
// (ErrUndecodable) once an encrypted message stopped a partition (CryptoFail) and the
// queue is drained, ErrConsumerClosed after
// Close, or the context's error.
func (c *Consumer) Receive(ctx context.Context) (*Message, error) {
	for {
		if m, ok := c.TryReceive(); ok {
			return m, nil
		}
		c.mu.Lock()
		// A pattern's consumer does not end with its topics: others may come.
		ended, closed, failed := c.ended == len(c.parts) && len(c.parts) > 0 && c.discovery == nil, c.closed, c.failed
		c.mu.Unlock()
		if closed {
			return nil, ErrConsumerClosed
		}
		if failed != nil {
			if m, ok := c.TryReceive(); ok {
				return m, nil
			}
			return nil, failed
		}
		if ended {
			if m, ok := c.TryReceive(); ok {
				return m, nil
			}
			return nil, ErrEndOfTopic
		}
		select {
		case <-c.avail:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
		}
	}
}

// Buffered returns how many messages wait to be received.
func (c *Consumer) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) - c.head
}

// Ack acknowledges m; acknowledgements are grouped and sent within AckGroupTime.
func (c *Consumer) Ack(m *Message) error { return m.pc.ack(m) }

// AckSync acknowledges m at once and waits for the broker's confirmation.
func (c *Consumer) AckSync(ctx context.Context, m *Message) error { return m.pc.ackSync(ctx, m) }

// AckCumulative acknowledges m and everything before it on its partition (not for
// Shared or KeyShared subscriptions).
func (c *Consumer) AckCumulative(ctx context.Context, m *Message) error {
	if c.opts.Type == Shared || c.opts.Type == KeyShared {
		return fmt.Errorf("%w: cumulative acknowledgement is not allowed on a %s subscription", ErrInvalidOptions, c.opts.Type)
	}
	return m.pc.ackCumulative(ctx, m)
}

// Nack asks for m to be delivered again after NackRedeliveryDelay.
func (c *Consumer) Nack(m *Message) { m.pc.nack(m, c.opts.NackRedeliveryDelay) }

// NackAfter asks for m to be delivered again after delay (a negative delay is none), so
// each message can have its own backoff. On an Exclusive or Failover subscription the
// broker redelivers everything not acknowledged on the partition when the delay passes.
// The broker redelivers whole entries: messages of one batch nacked go back together
// once the longest of their delays has passed, and of the batch only those nacked are
// delivered again on a Shared or Key_Shared subscription (on the others, every one not
// acknowledged), never one acknowledged.
func (c *Consumer) NackAfter(m *Message, delay time.Duration) { m.pc.nack(m, max(delay, 0)) }

// RedeliverUnacknowledged asks the broker to deliver again every message not
// acknowledged yet; queued messages are dropped first, as they will come again.
func (c *Consumer) RedeliverUnacknowledged() {
	for _, pc := range c.partitions() {
		pc.redeliverAll()
	}
}

// Close flushes grouped acknowledgements, closes the consumer on the broker and stops.
func (c *Consumer) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		// What is still queued is no longer counted against the MemoryLimiter: the
		// consumer is done with it (the broker redelivers what was not acknowledged).
		c.uncharge(c.queue[c.head:])
		c.mu.Unlock()
		close(c.stop)
		c.wg.Wait() // no partition is added from here on
		close(c.done)
		ctx, cancel := context.WithTimeout(c.cut, 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, pc := range c.partitions() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pc.close(ctx)
			}()
		}
		wg.Wait()
		c.cutNow()
		c.events.close()
		c.client.mu.Lock()
		delete(c.client.consumers, c)
		c.client.mu.Unlock()
	})
	return nil
}

// ConsumerStats are a consumer's counters, summed over partitions.
type ConsumerStats struct {
	Reconnects       int
	PermitsGranted   int // FLOW permits sent
	Discarded        int // messages dropped before delivery (corrupt, filtered, incomplete chunks)
	ChecksumFailures int // messages discarded (acknowledged) for a payload checksum mismatch
	Malformed        int // messages discarded because their metadata, batch or chunk fields do not validate (not those DeliverUndecodable delivers)
	BatchTrackers    int // batches partly acknowledged, whose remaining indexes this consumer tracks
	HeldBytes        int // with ReceiverQueueBytes: payload bytes queued and not yet taken
	// With a MemoryLimiter: the bytes charged to it for queued messages, and reserved
	// from it for the permits in flight.
	ChargedBytes, ReservedBytes int
	// ReassemblyBytes: payload bytes of the chunks of messages being reassembled (with a
	// MemoryLimiter, charged to it as they arrive).
	ReassemblyBytes int
	// ChunkedDropped: chunked messages dropped before they were whole (expired, pushed
	// out by MaxPendingChunkedMessages or MaxChunkedMessageSize, broken off by a chunk
	// out of order); their chunks were acknowledged and are counted in Discarded.
	ChunkedDropped int
	// Parked: entries kept as stored, not yet decompressed, until the MemoryLimiter has
	// room for what they decompress to beyond the broker's limit (or behind such an
	// entry, in order); ParkedBytes is their stored size.
	Parked, ParkedBytes int
	// Undecodable counts the entries the consumer could not decode, by reason, each
	// time one arrived (a redelivered one counts again), whatever became of it:
	// acknowledged with a validation error, delivered as stored (DeliverUndecodable,
	// CryptoConsume), or stopping its partition (CryptoFail). Only reasons seen are keys.
	Undecodable map[UndecodableReason]int
	// A TopicsPattern's consumer: the topics consumed now, how many were added and
	// removed since it started, and how it discovers them (DiscoveryWatching,
	// DiscoveryReconnecting, DiscoveryPolling; "" for a consumer of fixed topics).
	Topics                     int
	TopicsAdded, TopicsRemoved int
	Discovery                  string
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	var s ConsumerStats
	topics := map[string]struct{}{}
	for _, pc := range c.partitions() {
		topics[pc.baseTopic()] = struct{}{}
		pc.mu.Lock()
		s.Reconnects += pc.reconnects
		s.PermitsGranted += pc.permitsGranted
		s.Discarded += pc.discarded
		s.ChecksumFailures += pc.checksumFailures
		s.Malformed += pc.malformed
		s.BatchTrackers += len(pc.trackers)
		s.HeldBytes += pc.heldBytes
		s.ReservedBytes += pc.reserved
		s.ReassemblyBytes += pc.chunkBytes
		s.ChunkedDropped += pc.chunkedDropped
		for _, pf := range pc.parked {
			if !pf.delivering {
				s.Parked++
				s.ParkedBytes += pf.held
			}
		}
		for r, n := range pc.undecodable {
			if n > 0 {
				if s.Undecodable == nil {
					s.Undecodable = map[UndecodableReason]int{}
				}
				s.Undecodable[UndecodableReason(r)] += n
			}
		}
		pc.mu.Unlock()
	}
	c.mu.Lock()
	for _, m := range c.queue[c.head:] {
		s.ChargedBytes += m.charged
	}
	c.mu.Unlock()
	s.Topics = len(topics)
	if c.discovery != nil {
		c.discovery.stats(&s)
	}
	return s
}
