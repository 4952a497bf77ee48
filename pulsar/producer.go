package pulsar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Producer publishes to a topic, partitioned or not.
type Producer struct {
	client *Client
	topic  string
	opts   ProducerOptions
	// parts holds the partition producers; it only grows (partitions added at runtime),
	// replaced whole so route reads it without a lock.
	parts atomic.Pointer[[]*partitionProducer]
	rr    atomic.Uint64 // keyless routing: the next partition without batching, the offset with it
	once  sync.Once

	growMu sync.Mutex // serialises growth with Close
	closed bool
	stop   chan struct{}
	// cut ends the flush of a Close under way: a CloseContext caller whose ctx ended.
	cut    context.Context
	cutNow context.CancelFunc
	wg     sync.WaitGroup
}

// CreateProducer looks the topic up, registers a producer on every partition and
// returns once all are ready (or the first error).
func (c *Client) CreateProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	topic, err := TopicName(opts.Topic)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClientClosed
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	n, err := c.partitions(ctx, topic, opts.Backoff)
	if err != nil {
		return nil, err
	}
	p := &Producer{client: c, topic: topic, opts: opts, stop: make(chan struct{})}
	p.rr.Store(rand.Uint64()) // keyless messages start on a random partition (see route)
	p.cut, p.cutNow = context.WithCancel(context.Background())
	var parts []*partitionProducer
	if n == 0 {
		parts = []*partitionProducer{newPartitionProducer(c, topic, -1, opts)}
	} else {
		for i := range n {
			parts = append(parts, newPartitionProducer(c, partitionName(topic, i), int32(i), opts))
		}
	}
	for i, pp := range parts {
		if err := pp.start(ctx); err != nil {
			for _, started := range parts[:i] {
				started.close(context.Background())
			}
			return nil, err
		}
	}
	p.parts.Store(&parts)
	if n > 0 && opts.PartitionsRefreshInterval > 0 {
		p.wg.Add(1)
		go p.watchPartitions()
	}
	c.mu.Lock()
	if c.producers != nil {
		c.producers[p] = struct{}{}
	}
	c.mu.Unlock()
	return p, nil
}

// Topic is the fully qualified topic name.
func (p *Producer) Topic() string { return p.topic }

// Partitions is the number of partitions (1 for a non-partitioned topic).
func (p *Producer) Partitions() int { return len(p.partitions()) }

func (p *Producer) partitions() []*partitionProducer { return *p.parts.Load() }

// watchPartitions re-reads the topic's partition count every PartitionsRefreshInterval
// and starts producing to partitions added at runtime (the official clients poll too).
func (p *Producer) watchPartitions() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.PartitionsRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.grow()
		}
	}
}

// grow starts producers on the partitions beyond those known and adopts them all
// together: keyed messages are routed by the partition count, so a count between the
// old and the new one (some new partitions ready, one refused) would put keys where
// neither count does. As the Java client does, a failure closes the new producers and
// keeps the old count; it is retried at the next refresh.
func (p *Producer) grow() {
	ctx, cancel := contextUntil(p.stop)
	defer cancel()
	ctx, cancelOp := context.WithTimeout(ctx, p.client.opts.OperationTimeout)
	defer cancelOp()
	n, err := p.client.partitions(ctx, p.topic, p.opts.Backoff)
	old := p.partitions()
	if err != nil || n <= len(old) {
		if err != nil {
			p.client.log.Warn("re-reading the partitions failed", "topic", p.topic, "error", err)
		}
		return
	}
	added := make([]*partitionProducer, 0, n-len(old))
	for i := len(old); i < n; i++ {
		pp := newPartitionProducer(p.client, partitionName(p.topic, i), int32(i), p.opts)
		if err := pp.start(ctx); err != nil {
			p.client.log.Warn("producing to a new partition failed; keeping the old partition count until the next refresh", "topic", p.topic, "partition", i, "error", err)
			for _, started := range added {
				started.close(context.Background())
			}
			return
		}
		added = append(added, pp)
	}
	p.growMu.Lock()
	if p.closed {
		p.growMu.Unlock()
		for _, pp := range added {
			pp.close(context.Background())
		}
		return
	}
	parts := append(append(make([]*partitionProducer, 0, len(old)+len(added)), old...), added...)
	p.parts.Store(&parts)
	p.growMu.Unlock()
	p.client.log.Info("the topic has new partitions; producing to them", "topic", p.topic, "partitions", len(parts))
}

func (p *Producer) route(m *ProducerMessage) *partitionProducer {
	parts := p.partitions()
	n := len(parts)
	if n == 1 {
		return parts[0]
	}
	if m.Key != "" {
		return parts[p.opts.HashingScheme.Partition(m.Key, n)]
	}
	if m.RoutingKey != "" {
		return parts[p.opts.HashingScheme.Partition(m.RoutingKey, n)]
	}
	// Keyless messages go round-robin from the producer's random first partition, as
	// with the Java client's default router: one message each without batching, and
	// with batching one partition per BatchingMaxDelay of time, so a batch fills on one
	// partition and a slow topic still spreads.
	if p.opts.DisableBatching {
		return parts[p.rr.Add(1)%uint64(n)]
	}
	window := max(p.opts.BatchingMaxDelay, time.Millisecond)
	return parts[(p.rr.Load()+uint64(time.Now().UnixNano()/int64(window)))%uint64(n)]
}

// SendAsync queues m and returns; cb runs (on the producer's callback goroutine, in
// order) once the broker has persisted the message or it failed. SendAsync blocks while
// the partition's pending queue is full, until ctx ends. Nothing of m is kept: the
// payload (of a chunked message too, whose chunks are all queued before SendAsync
// returns), key and properties are copied, so the caller may reuse them at once.
// Messages keep the order of the SendAsync calls, chunked or not. cb runs exactly once,
// also when the producer is closed or failed (then possibly before SendAsync returns).
func (p *Producer) SendAsync(ctx context.Context, m *ProducerMessage, cb func(MessageID, error)) {
	p.route(m).sendAsync(ctx, m, cb, false)
}

// Send publishes m and waits until the broker has persisted it.
func (p *Producer) Send(ctx context.Context, m *ProducerMessage) (MessageID, error) {
	type result struct {
		id  MessageID
		err error
	}
	ch := make(chan result, 1)
	p.route(m).sendAsync(ctx, m, func(id MessageID, err error) { ch <- result{id, err} }, true)
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return MessageID{}, ctx.Err()
	}
}

// SendStream publishes one message of size bytes read from r, chunk by chunk, without
// holding it whole; m supplies the key, properties and event time (m.Payload is
// ignored). Streamed messages are sent uncompressed. It returns once the broker
// persisted the last chunk.
func (p *Producer) SendStream(ctx context.Context, m *ProducerMessage, size int64, r io.Reader) (MessageID, error) {
	if size < 0 {
		return MessageID{}, fmt.Errorf("%w: negative size %d", ErrInvalidOptions, size)
	}
	pp := p.route(m)
	if p.opts.DisableChunking {
		pp.mu.Lock()
		limit := pp.maxMsgSize - messageOverhead(m, pp.name)
		pp.mu.Unlock()
		if size > int64(limit) {
			return MessageID{}, fmt.Errorf("%w: %d bytes, the broker's limit is %d and chunking is off", ErrMessageTooLarge, size, limit)
		}
	}
	return pp.sendChunked(ctx, m, r, size)
}

// Flush sends what is batched and waits until every message queued before the call
// is settled.
func (p *Producer) Flush(ctx context.Context) error {
	var errs []error
	for _, pp := range p.partitions() {
		if err := pp.flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close flushes (for at most the send timeout), closes the producer on the broker and
// fails whatever is still pending with ErrProducerClosed.
func (p *Producer) Close() error { return p.CloseContext(context.Background()) }

// CloseContext is Close with the flush also bounded by ctx: when ctx ends, what is
// still pending is failed with ErrProducerClosed at once and CloseContext returns
// promptly. It cuts a Close already under way (started by another caller) the same
// way, so a shutdown's deadline holds whoever began closing the producer.
func (p *Producer) CloseContext(ctx context.Context) error {
	stop := context.AfterFunc(ctx, p.cutNow)
	defer stop()
	p.once.Do(func() {
		timeout := p.opts.SendTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		p.growMu.Lock()
		p.closed = true
		close(p.stop)
		p.growMu.Unlock()
		p.wg.Wait()
		ctx, cancel := context.WithTimeout(p.cut, timeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, pp := range p.partitions() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pp.close(ctx)
			}()
		}
		wg.Wait()
		p.cutNow()
		p.client.mu.Lock()
		delete(p.client.producers, p)
		p.client.mu.Unlock()
	})
	return nil
}

// Err says why the producer stopped for good (nil while it works): a broker's
// permanent refusal or, with Deduplication, a send timeout. Every later send fails with it.
func (p *Producer) Err() error {
	for _, pp := range p.partitions() {
		pp.mu.Lock()
		err := pp.failed
		pp.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Stats are a producer's counters.
type ProducerStats struct {
	PendingMessages int
	PendingBytes    int
	Reconnects      int
	Resent          int // messages or batches sent again after reconnects
}

// Stats returns the producer's current counters, summed over partitions.
func (p *Producer) Stats() ProducerStats {
	var s ProducerStats
	for _, pp := range p.partitions() {
		n, b := pp.limiter.pending()
		s.PendingMessages += n
		s.PendingBytes += b
		pp.mu.Lock()
		s.Reconnects += pp.reconnects
		s.Resent += pp.resent
		pp.mu.Unlock()
	}
	return s
}
