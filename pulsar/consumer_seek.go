package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Seeking moves a subscription's cursor with the protocol's SEEK (by message id or by
// publish time). The broker answers by closing every consumer of the subscription
// (CLOSE_CONSUMER), resetting the cursor, then answering the request; each partition
// consumer resubscribes by itself and the broker delivers from the new position. As the
// Java client does (ConsumerImpl.seekAsync), what was received before the seek and is
// still queued is dropped, acknowledgements grouped before it are sent first, and
// nothing that arrives on the registration the seek was sent on reaches the
// application: it is from the old position. Nacks waiting for their delay are forgotten
// (the Java client keeps them, and their redelivery sends back what the new position
// delivered).

// ErrSeekNotReady: a partition was not subscribed (it was reconnecting) for the whole
// time the seek could wait; nothing was moved on it. Temporary.
var ErrSeekNotReady = errors.New("pulsar: the consumer is reconnecting; the seek could not be sent")

// seekState is a partition consumer's part of a seek (under p.mu).
type seekState struct {
	// on is the registration a seek was sent on while its answer is awaited: what
	// arrives on it is dropped (onPermits counts the permits those arrivals used, given
	// back if the registration survives the seek).
	on        *consumerHandle
	onPermits int
	// from, after a seek to a message id, is that message: it (and, inside a batch, the
	// batch's earlier messages) is left out when its entry comes, as the Java client
	// leaves it out (the broker delivers from the entry on; the Java client's seek sends
	// the earlier messages of a batch as acknowledged in the seek's ack_set, which only
	// a broker with batch-index acks honours, and on the entry's arrival drops what is
	// not after the seek's message). What is left out is acknowledged: it is before the
	// position, as the broker counts what precedes the entry.
	from *MessageID
}

// Seek moves the subscription of a consumer of one topic to id: the consumer receives
// from the message after id on, as the Java client's seek to a message it received does
// (TestEgressReplaysByTimeAndByIDAsTheJavaClientSeeks compares them on a real broker,
// batched and not). An id names one partition of a
// partitioned topic (id.Partition), and only that partition moves, as with the Java
// client's seek to a message it received. Use SeekTopic for a consumer of several topics.
func (c *Consumer) Seek(ctx context.Context, id MessageID) error {
	if len(c.opts.Topics) != 1 {
		return fmt.Errorf("%w: a message id names no topic and the consumer reads %d: use SeekTopic", ErrInvalidOptions, len(c.opts.Topics))
	}
	return c.SeekTopic(ctx, c.opts.Topics[0], id)
}

// SeekTopic is Seek for the consumer's topic named topic (as given in Topics, or its full name).
func (c *Consumer) SeekTopic(ctx context.Context, topic string, id MessageID) error {
	full, err := TopicName(topic)
	if err != nil {
		return err
	}
	// The partition consumers say whether the topic is partitioned and how far (the
	// partition watcher owns c.partitioned).
	n, partitioned := 0, false
	for _, pc := range c.partitions() {
		if pc.partition >= 0 && pc.topic == partitionName(full, int(pc.partition)) {
			n, partitioned = max(n, int(pc.partition)+1), true
		}
	}
	want := full
	switch {
	case partitioned && (id.Partition < 0 || int(id.Partition) >= n):
		return fmt.Errorf("%w: %s names partition %d; %s has partitions 0 to %d", ErrInvalidMessageID, id, id.Partition, full, n-1)
	case partitioned:
		want = partitionName(full, int(id.Partition))
	case id.Partition >= 0:
		return fmt.Errorf("%w: %s names partition %d; %s is not partitioned (its ids have -1)", ErrInvalidMessageID, id, id.Partition, full)
	}
	if id.LedgerID < 0 || id.EntryID < 0 {
		return fmt.Errorf("%w: %s: ledger and entry must not be negative", ErrInvalidMessageID, id)
	}
	var targets []*partitionConsumer
	for _, pc := range c.partitions() {
		if pc.topic == want {
			targets = append(targets, pc)
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("%w: the consumer does not read %s", ErrInvalidOptions, want)
	}
	mid := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.LedgerID)), EntryId: proto.Uint64(uint64(id.EntryID))}
	from := &id
	return c.seek(ctx, targets, func() *pb.CommandSeek { return &pb.CommandSeek{MessageId: mid} }, from,
		fmt.Sprintf("to %s on %s", id, want))
}

// SeekByTime moves the subscription, on every partition of every topic, to the first
// message published at t or later (the broker compares the publish time of entries;
// messages of one batch share their entry's).
func (c *Consumer) SeekByTime(ctx context.Context, t time.Time) error {
	if t.UnixMilli() < 0 {
		return fmt.Errorf("%w: seek time %s is before 1970", ErrInvalidOptions, t.Format(time.RFC3339Nano))
	}
	ms := uint64(t.UnixMilli())
	return c.seek(ctx, c.partitions(), func() *pb.CommandSeek { return &pb.CommandSeek{MessagePublishTime: proto.Uint64(ms)} }, nil,
		"to "+t.UTC().Format(time.RFC3339Nano))
}

// seek seeks each of targets at once and waits for every answer.
func (c *Consumer) seek(ctx context.Context, targets []*partitionConsumer, cmd func() *pb.CommandSeek, from *MessageID, what string) error {
	c.seekMu.Lock()
	defer c.seekMu.Unlock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrConsumerClosed
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, pc := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pc.seekRetrying(ctx, cmd(), from)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pulsar: seeking %q %s: %w", c.opts.Subscription, what, err)
	}
	return nil
}

// seekRetrying sends the seek once the partition is subscribed, waiting for a
// reconnection in progress (within ctx).
func (p *partitionConsumer) seekRetrying(ctx context.Context, cmd *pb.CommandSeek, from *MessageID) error {
	for attempt := 0; ; attempt++ {
		err := p.seek(ctx, cmd, from)
		if !errors.Is(err, ErrSeekNotReady) {
			return err
		}
		t := time.NewTimer(min(p.opts.Backoff.delay(attempt), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s: %w", err, p.topic, ctx.Err())
		case <-p.done:
			t.Stop()
			return ErrConsumerClosed
		case <-t.C:
		}
	}
}

// seek sends one SEEK on the partition's registration and waits for its answer.
func (p *partitionConsumer) seek(ctx context.Context, cmd *pb.CommandSeek, from *MessageID) error {
	p.mu.Lock()
	switch {
	case p.closing:
		p.mu.Unlock()
		return ErrConsumerClosed
	case p.state == stateFailed:
		p.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrConsumerFailed, p.topic)
	case p.state != stateReady || p.cn == nil:
		p.mu.Unlock()
		return ErrSeekNotReady
	}
	h, cn := p.reg, p.cn
	// Acknowledgements made before the seek reach the broker before it.
	p.flushAcksLocked()
	p.seekSt.on, p.seekSt.onPermits = h, 0
	p.dropAllChunksLocked()
	parkedPermits, parkedBytes := p.unparkLocked()
	p.mu.Unlock()
	// What is queued is from the old position.
	permits, bytes := p.c.removeFrom(p)
	permits += parkedPermits
	bytes += parkedBytes

	reqID := p.client.nextRequestID()
	cmd.ConsumerId, cmd.RequestId = proto.Uint64(p.id), proto.Uint64(reqID)
	_, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: cmd})

	p.mu.Lock()
	survived := p.reg == h && p.state == stateReady
	if p.seekSt.on == h {
		permits += p.seekSt.onPermits
		p.seekSt.on, p.seekSt.onPermits = nil, 0
	}
	if err == nil {
		p.seekSt.from = from
		// Every entry comes again from the new position: the old trackers describe
		// deliveries that are void, and so do nacks still waiting for their delay
		// (coming due, they would send back what the new position delivered).
		p.trackers = map[entryKey]*batchTracker{}
		clear(p.nacks)
	}
	if survived {
		// The broker kept the registration (it refused the seek, or did not close its
		// consumers): the permits of what was dropped go back to it.
		p.heldBytes = max(0, p.heldBytes-bytes)
		p.returnPermitsLocked(permits)
	}
	p.mu.Unlock()
	if err != nil {
		if survived {
			// Nothing moved: what was dropped from the queue must come again.
			p.redeliverAll()
		}
		return fmt.Errorf("%s: %w", p.topic, err)
	}
	return nil
}

// droppedDuringSeekLocked reports whether a frame arriving on h must be dropped because
// a seek was sent on h (it is from the old position); it counts the permits it used.
func (p *partitionConsumer) droppedDuringSeekLocked(h *consumerHandle, f *frame.Frame) bool {
	if p.seekSt.on != h || h == nil {
		return false
	}
	n := 1
	md := &pb.MessageMetadata{}
	if f != nil && proto.Unmarshal(f.Metadata, md) == nil && md.NumMessagesInBatch != nil {
		n = max(int(md.GetNumMessagesInBatch()), 1)
	}
	p.seekSt.onPermits += n
	return true
}

// seekAckSetLocked returns the ack set an entry of a batch is read with: after a seek to
// a message inside it, that message and the earlier ones count as acknowledged, as the
// Java client leaves them out (the broker's own ack set, if any, still applies).
func (p *partitionConsumer) seekAckSetLocked(mid MessageID, size int, ackSet []int64) []int64 {
	from := p.seekSt.from
	if from == nil || from.BatchIndex < 0 || from.LedgerID != mid.LedgerID || from.EntryID != mid.EntryID {
		return ackSet
	}
	bits := make([]int64, (size+63)/64)
	for i := int(from.BatchIndex) + 1; i < size; i++ {
		bits[i/64] |= 1 << (i % 64)
	}
	if len(ackSet) > 0 {
		for i := range bits {
			if i < len(ackSet) {
				bits[i] &= ackSet[i]
			} else {
				bits[i] = 0
			}
		}
	}
	return bits
}

// seekAtStart applies StartTime or StartMessageID once every partition is subscribed.
func (c *Consumer) seekAtStart(ctx context.Context) error {
	switch {
	case !c.opts.StartTime.IsZero():
		return c.SeekByTime(ctx, c.opts.StartTime)
	case c.opts.StartMessageID != nil:
		return c.Seek(ctx, *c.opts.StartMessageID)
	}
	return nil
}

// seekSkipsLocked reports whether an entry (of size messages; 0: not batched) is
// wholly left out after a seek (see seekState.from): the message not batched the seek
// was to, or a batch whose last message it was.
func (p *partitionConsumer) seekSkipsLocked(mid MessageID, size int) bool {
	from := p.seekSt.from
	if from == nil || from.LedgerID != mid.LedgerID || from.EntryID != mid.EntryID {
		return false
	}
	if size == 0 {
		return from.BatchIndex < 0
	}
	return from.BatchIndex >= 0 && int(from.BatchIndex) >= size-1
}

// seekSkipUnlock acknowledges and discards an entry a seek left out; p.mu is released.
func (p *partitionConsumer) seekSkipUnlock(a *arrival, permits int) {
	p.ackDroppedLocked(a.mid) // before the seek's position
	p.unreserveShareLocked(a.share)
	p.discardLocked(nil, a.id, permits, 0, false)
	p.mu.Unlock()
}
