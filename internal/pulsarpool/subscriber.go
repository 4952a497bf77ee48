package pulsarpool

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Subscriber is the egress Subscriber: one consumer of the bridge's client per stream
// (they share the client's broker connections). Every message is charged to the budget
// (its payload's bytes) from its arrival in the consumer's queue until it is
// acknowledged, negatively acknowledged or its subscription closes: the budget is the
// consumer's pulsar.MemoryLimiter, so the consumer charges what it queues and withholds
// flow permits the budget cannot cover, and with KeepMemoryCharge the charge passes with
// the message to the delivery (transferred, never counted twice nor dropped for a
// moment), and goes back through the consumer (pulsar.Consumer.Settled) when the
// delivery is settled. A stream always takes what its consumer has queued (those bytes
// are charged already); while it holds unsettled deliveries its consumer grants permits
// only as far as the budget covers them, so a spent budget pauses egress as it pauses
// ingress reads; a stream holding none always gets a message per partition, so a
// budget spent elsewhere cannot stall it for good.
type Subscriber struct {
	client *pulsar.Client
	budget *budget.Budget
	dlq    *Pool // publishes dead letters; nil: none
	mu     sync.Mutex
	open   map[*subscription]struct{}
	// What closed consumers counted, so the metrics' counters never go back.
	retiredReconnects, retiredPermits int64
	retiredCorrupt, retiredMalformed  int64
	retiredChunkedDropped             int64
	retiredUndecodable                map[pulsar.UndecodableReason]int64
	schemas                           schemaCache
	// retiredPattern: what closed consumers of topicsPattern streams counted, by stream.
	retiredPattern map[string]*telemetry.PatternStats
}

// NewSubscriber returns the egress Subscriber of c, charging b (nil: no budget).
func NewSubscriber(c *pulsar.Client, b *budget.Budget) *Subscriber {
	return &Subscriber{client: c, budget: b, open: map[*subscription]struct{}{}}
}

// Memory returns what egress holds of the budget: the bytes charged for messages in the
// consumers' queues and for the chunks of messages they are reassembling, reserved for
// their permits in flight, and charged for deliveries handed to streams and not yet
// settled.
func (s *Subscriber) Memory() (queues, reserved, delivered int64) {
	s.mu.Lock()
	subs := make([]*subscription, 0, len(s.open))
	for sub := range s.open {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		cs := sub.c.Stats()
		queues += int64(cs.ChargedBytes + cs.ReassemblyBytes)
		reserved += int64(cs.ReservedBytes)
		sub.mu.Lock()
		delivered += sub.heldBytes
		sub.mu.Unlock()
	}
	return queues, reserved, delivered
}

// DeadLetters has the subscriber's subscriptions publish dead letters through ps; call
// it before the first Subscribe.
func (s *Subscriber) DeadLetters(ps *Pool) { s.dlq = ps }

// AddStats adds the egress consumers' figures to st.
func (s *Subscriber) AddStats(st *telemetry.PulsarStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.ConsumerReconnects += s.retiredReconnects
	st.PermitsGranted += s.retiredPermits
	st.Corrupt += s.retiredCorrupt
	st.Malformed += s.retiredMalformed
	st.ChunkedDropped += s.retiredChunkedDropped
	if st.Undecodable == nil {
		st.Undecodable = map[string]int64{}
	}
	for _, r := range pulsar.UndecodableReasons() {
		st.Undecodable[r.String()] += s.retiredUndecodable[r] // every reason, 0 until one comes
	}
	for sub := range s.open {
		cs := sub.c.Stats()
		st.ConsumerReconnects += int64(cs.Reconnects)
		st.PermitsGranted += int64(cs.PermitsGranted)
		st.Corrupt += int64(cs.ChecksumFailures)
		st.Malformed += int64(cs.Malformed)
		st.ChunkedDropped += int64(cs.ChunkedDropped)
		for r, n := range cs.Undecodable {
			st.Undecodable[r.String()] += int64(n)
		}
		st.Buffered += int64(sub.c.Buffered())
	}
}

// PatternStats returns the discovery figures of the topicsPattern streams that have or
// had a consumer, by stream.
func (s *Subscriber) PatternStats() []telemetry.PatternStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[string]*telemetry.PatternStats{}
	get := func(stream string) *telemetry.PatternStats {
		ps := by[stream]
		if ps == nil {
			ps = &telemetry.PatternStats{Stream: stream, Discovery: map[string]int64{}}
			by[stream] = ps
		}
		return ps
	}
	for stream, r := range s.retiredPattern {
		ps := get(stream)
		ps.Added, ps.Removed = r.Added, r.Removed
	}
	for sub := range s.open {
		if sub.patternStream == "" {
			continue
		}
		cs := sub.c.Stats()
		ps := get(sub.patternStream)
		ps.Topics = max(ps.Topics, int64(cs.Topics))
		ps.Added += int64(cs.TopicsAdded)
		ps.Removed += int64(cs.TopicsRemoved)
		ps.Discovery[cs.Discovery]++
	}
	out := make([]telemetry.PatternStats, 0, len(by))
	for _, ps := range by {
		out = append(out, *ps)
	}
	return out
}

var cryptoActions = map[string]pulsar.CryptoFailureAction{
	"fail": pulsar.CryptoFail, "discard": pulsar.CryptoDiscard, "deliver": pulsar.CryptoConsume,
}

var subTypes = map[string]pulsar.SubscriptionType{
	"exclusive": pulsar.Exclusive, "shared": pulsar.Shared, "failover": pulsar.Failover, "key_shared": pulsar.KeyShared,
}

// Subscribe implements egress.Subscriber: one consumer of the client per stream.
func (s *Subscriber) Subscribe(ctx context.Context, o egress.SubscribeOptions) (egress.Subscription, error) {
	pos := pulsar.Latest
	if o.Position == "earliest" {
		pos = pulsar.Earliest
	}
	var lim pulsar.MemoryLimiter
	if s.budget != nil {
		lim = s.budget
	}
	var startID *pulsar.MessageID
	if o.StartMessageID != "" {
		id, err := pulsar.ParseMessageID(o.StartMessageID)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", egress.ErrBadPosition, err)
		}
		startID = &id
	}
	var pattern *pulsar.TopicsPattern
	if o.TopicsPattern != "" {
		var err error
		if pattern, err = pulsar.ParseTopicsPattern(o.TopicsPattern); err != nil {
			return nil, err
		}
	}
	c, err := s.client.Subscribe(ctx, pulsar.ConsumerOptions{Topics: o.Topics, Subscription: o.Subscription, Type: subTypes[o.Type],
		TopicsPattern: pattern, NewTopicsLatest: o.NewTopicsPosition == "latest", DiscoveryInterval: o.DiscoveryInterval,
		InitialPosition: pos, StartTime: o.StartTime, StartMessageID: startID, ReceiverQueueSize: o.ReceiverQueue, ReceiverQueueBytes: int(o.ReceiverQueueBytes),
		MaxPendingChunkedMessages: o.MaxPendingChunkedMessages,
		DeliverUndecodable:        o.DeliverUndecodable, CryptoFailureAction: cryptoActions[o.CryptoFailure],
		MemoryLimiter: lim, KeepMemoryCharge: lim != nil,
		// A message nacked after its acknowledgement timeout comes back soon, not in a minute.
		NackRedeliveryDelay: time.Second,
		// Acknowledge single messages of a batch (PIP-54), so a redelivered batch brings
		// back only what was not acknowledged. A broker without
		// acknowledgmentAtBatchIndexLevelEnabled (Pulsar's default) ignores the ack_set and
		// redelivers whole batches: the consumer still filters acknowledged members out of
		// the redeliveries it asks for (nacks, ack timeouts), but once the stream's consumer
		// is gone they come again (duplicates, never loss; docs/http-api.md).
		BatchIndexAck: true})
	if err != nil {
		var se *pulsar.ServerError
		switch {
		case errors.As(err, &se) && se.Code == pulsar.CodeConsumerBusy:
			return nil, fmt.Errorf("%w: subscription %s (%s) already has its consumer: %v", egress.ErrBusy, o.Subscription, o.Type, err)
		case errors.Is(err, pulsar.ErrInvalidMessageID):
			return nil, fmt.Errorf("%w: %w", egress.ErrBadPosition, err)
		case errors.As(err, &se) && !se.Retryable(), errors.Is(err, pulsar.ErrInvalidTopic), errors.Is(err, pulsar.ErrInvalidOptions),
			errors.Is(err, pulsar.ErrHandshake) && !pulsar.IsRetryable(err), errors.Is(err, context.Canceled):
			return nil, err
		}
		// Not reaching a broker (dialing, the connection, the lookup, the deadline) is
		// temporary, as it is for producers, and so is a handshake refused with
		// AuthenticationError (see ClassifyCreate).
		return nil, fmt.Errorf("%w: %w", egress.ErrUnavailable, err)
	}
	sub := &subscription{c: c, owner: s, name: o.Subscription}
	if pattern != nil {
		sub.patternStream = o.Stream
	}
	s.mu.Lock()
	s.open[sub] = struct{}{}
	s.mu.Unlock()
	return sub, nil
}

type subscription struct {
	c     *pulsar.Consumer
	owner *Subscriber
	name  string // the subscription's
	// patternStream names the topicsPattern stream the consumer reads for ("": not one).
	patternStream string

	mu sync.Mutex
	// held lists what was delivered, charged to the budget and not yet settled, linked
	// through the handles: a map cost a hash insert and delete per message.
	held      handleList
	heldBytes int64
	closed    bool
}

// streamFrom is the payload size from which a message goes to egress as a Body: a
// reassembled chunked message is then written from its chunks, never joined in memory.
const streamFrom = 32 << 10

// handle is a Delivery's Handle: the message and what it was charged: size in all,
// extra of it by the subscription (the rest passed from the consumer's queue, given
// back with Consumer.Settled).
type handle struct {
	m           *pulsar.Message
	size, extra int64
	// prev and next link the handle in its subscription's held list while it is there.
	prev, next *handle
	listed     bool
	// The message's bytes are released (pulsar.Message.Release, letting its frame's
	// buffer be reused) once both are true, under the subscription's lock: the stream
	// copied them out (Copied) and the delivery is settled by an acknowledgement, a
	// negative one or a Release. Never once kept is set: a dead-lettering read them, and
	// the copy it handed to a producer may outlive the stream's wait for it.
	copied, kept, released bool
}

// handleList is a doubly-linked list of handles, in no particular order.
type handleList struct{ head *handle }

func (l *handleList) push(h *handle) {
	h.prev, h.next, h.listed = nil, l.head, true
	if l.head != nil {
		l.head.prev = h
	}
	l.head = h
}

// remove unlinks h, and says whether it was listed.
func (l *handleList) remove(h *handle) bool {
	if !h.listed {
		return false
	}
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		l.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.prev, h.next, h.listed = nil, nil, false
	return true
}

// delivered is a delivery and its handle in one allocation (two per message were a
// good part of a stream's allocations).
type delivered struct {
	d egress.Delivery
	h handle
}

// release gives back what h was charged.
func (s *subscription) release(h *handle) {
	s.owner.budget.Release(h.extra)
	s.c.Settled(h.m)
}

func (s *subscription) delivery(m *pulsar.Message) *egress.Delivery {
	x := &delivered{}
	h := &x.h
	s.transfer(h, m)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(h)
	} else {
		s.held.push(h)
		s.heldBytes += h.size
		s.mu.Unlock()
	}
	// Field by field into the new (zeroed) delivery: assigning a composite literal
	// copies the whole struct, with a write barrier over every pointer field of it
	// while the collector runs (runtime.wbMove, 3 % of a saturated stream's profile).
	d := &x.d
	d.ID, d.Topic, d.Key, d.OrderingKey, d.Properties = FormatID(m.ID), m.Topic, m.Key, m.OrderingKey, m.Properties
	d.PublishTime, d.EventTime, d.Redeliveries, d.SchemaVersion, d.Handle = m.PublishTime, m.EventTime, m.RedeliveryCount, m.SchemaVersion, h
	if m.Undecodable != nil {
		d.Undecodable = m.Undecodable
	} else if st := m.Stored; st != nil && len(st.EncryptionKeys) > 0 {
		e := &egress.Encryption{Algorithm: st.EncryptionAlgo, Param: st.EncryptionParam, Compression: st.Compression,
			UncompressedSize: st.UncompressedSize, BatchSize: st.NumMessages, Metadata: st.Metadata}
		for _, k := range st.EncryptionKeys {
			e.Keys = append(e.Keys, egress.EncryptionKey{Name: k.Name, Value: k.Value, Metadata: k.Metadata})
		}
		d.Encryption = e
	}
	if m.Size() >= streamFrom {
		d.Body, d.Size = m.Body(), int64(m.Size())
	} else {
		d.Payload = m.Payload()
	}
	return d
}

// settle releases what d was charged, once, and its message's bytes if the stream
// copied them out (see handle).
func (s *subscription) settle(d *egress.Delivery) *pulsar.Message {
	h := d.Handle.(*handle)
	s.mu.Lock()
	ok := s.held.remove(h)
	if ok {
		s.heldBytes -= h.size
		if h.copied && !h.kept {
			h.released = true
			h.m.Release()
		}
	}
	s.mu.Unlock()
	if ok {
		s.release(h)
	}
	return h.m
}

// Receive waits for the next message; its charge passes from the consumer's queue to
// the delivery. Taking a queued message never waits for room: its bytes are charged
// already. What keeps a stream that holds its deliveries from going beyond the budget
// is the consumer, which grants no permit beyond it while a message taken is unsettled
// (pulsar.Consumer.Settled).
func (s *subscription) Receive(ctx context.Context) (*egress.Delivery, error) {
	m, err := s.c.Receive(ctx)
	if err != nil {
		if errors.Is(err, pulsar.ErrEndOfTopic) {
			return nil, fmt.Errorf("%w: %w", egress.ErrEndOfTopic, err)
		}
		return nil, err
	}
	return s.delivery(m), nil
}

// transfer makes m's budget charge the delivery's: the consumer hands over what it
// charged while m was queued (KeepMemoryCharge), and the rest, if any (a message taken
// after its consumer closed), is charged here.
func (s *subscription) transfer(h *handle, m *pulsar.Message) {
	size, c := int64(m.Size()), m.MemoryCharge()
	h.m, h.size, h.extra = m, max(size, c), max(size-c, 0)
	s.owner.budget.Charge(h.extra)
}

// TryReceive returns a buffered message without waiting (see Receive).
func (s *subscription) TryReceive() (*egress.Delivery, bool) {
	m, ok := s.c.TryReceive()
	if !ok {
		return nil, false
	}
	return s.delivery(m), true
}

func (s *subscription) Ack(d *egress.Delivery) error { return s.c.Ack(s.settle(d)) }

// AckConfirmed implements egress.ConfirmedAcker: the deliveries are acknowledged at
// once, one ACK per partition with a request id, and each outcome is the broker's
// answer (pulsar.Consumer.AckSyncAll). A delivery is settled once its acknowledgement
// is confirmed; one that failed stays held, for the stream to acknowledge again or to
// let go with its redelivery.
func (s *subscription) AckConfirmed(ctx context.Context, ds []*egress.Delivery) []error {
	ms := make([]*pulsar.Message, len(ds))
	for i, d := range ds {
		ms[i] = d.Handle.(*handle).m
	}
	errs := s.c.AckSyncAll(ctx, ms)
	for i, d := range ds {
		if errs[i] == nil {
			s.settle(d)
		}
	}
	return errs
}

// Copied implements egress.PayloadCopier: the stream wrote d's record, and reads its
// payload no more. Its message's bytes are released once d is settled too (see handle);
// a delivery settled already (an acknowledgement that came before the stream wrote it) is
// left alone.
func (s *subscription) Copied(d *egress.Delivery) {
	h := d.Handle.(*handle)
	s.mu.Lock()
	if h.listed {
		h.copied = true
	}
	s.mu.Unlock()
}

// Release implements egress.Releaser: d's charge goes back, and the broker is told
// nothing (a redelivery of the same message superseded it).
func (s *subscription) Release(d *egress.Delivery) { s.settle(d) }

// ackTimeout bounds a cumulative acknowledgement, which waits for the broker's answer.
const ackTimeout = 10 * time.Second

// AckCumulative implements egress.CumulativeAcker: one acknowledgement on the broker for
// last and everything before it on its partition; each of covered is settled.
func (s *subscription) AckCumulative(last *egress.Delivery, covered []*egress.Delivery) error {
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := s.c.AckCumulative(ctx, last.Handle.(*handle).m); err != nil {
		return err
	}
	for _, d := range covered {
		s.settle(d)
	}
	return nil
}

func (s *subscription) Nack(d *egress.Delivery, after time.Duration) {
	s.c.NackAfter(s.settle(d), after)
}
func (s *subscription) Close() error {
	err := s.c.Close()
	s.mu.Lock()
	s.closed = true
	var held []*handle
	for h := s.held.head; h != nil; h = h.next {
		held = append(held, h)
	}
	for _, h := range held {
		s.held.remove(h)
	}
	s.heldBytes = 0
	s.mu.Unlock()
	for _, h := range held {
		s.release(h)
	}
	cs := s.c.Stats()
	o := s.owner
	o.mu.Lock()
	if _, ok := o.open[s]; ok {
		delete(o.open, s)
		o.retiredReconnects += int64(cs.Reconnects)
		o.retiredPermits += int64(cs.PermitsGranted)
		o.retiredCorrupt += int64(cs.ChecksumFailures)
		o.retiredMalformed += int64(cs.Malformed)
		o.retiredChunkedDropped += int64(cs.ChunkedDropped)
		for r, n := range cs.Undecodable {
			if o.retiredUndecodable == nil {
				o.retiredUndecodable = map[pulsar.UndecodableReason]int64{}
			}
			o.retiredUndecodable[r] += int64(n)
		}
		if s.patternStream != "" {
			if o.retiredPattern == nil {
				o.retiredPattern = map[string]*telemetry.PatternStats{}
			}
			r := o.retiredPattern[s.patternStream]
			if r == nil {
				r = &telemetry.PatternStats{Stream: s.patternStream}
				o.retiredPattern[s.patternStream] = r
			}
			r.Added += int64(cs.TopicsAdded)
			r.Removed += int64(cs.TopicsRemoved)
		}
	}
	o.mu.Unlock()
	return err
}

// Property names of a dead letter's origin: Pulsar's Java client's, so the tools that
// read its dead-letter topics read the bridge's. It writes the origin id under the
// legacy name too (PropertyOriginMessageIDLegacy, sic), for readers of older versions.
const (
	PropertyRealTopic             = "REAL_TOPIC"
	PropertyRealSubscription      = "REAL_SUBSCRIPTION"
	PropertyOriginMessageID       = "ORIGIN_MESSAGE_ID"
	PropertyOriginMessageIDLegacy = "ORIGIN_MESSAGE_IDY_TIME"
)

// Property names of a dead letter the consumer could not decode: why, and how the
// entry was stored, so its payload (the entry's, as stored) can be decoded by hand.
const (
	PropertyUndecodableReason      = "UNDECODABLE_REASON"
	PropertyOriginCompression      = "ORIGIN_COMPRESSION"
	PropertyOriginUncompressedSize = "ORIGIN_UNCOMPRESSED_SIZE"
	PropertyOriginNumMessages      = "ORIGIN_NUM_MESSAGES"
	PropertyOriginMetadata         = "ORIGIN_METADATA" // base64 of the MessageMetadata as stored
)

// errSettled: a dead-lettering of a delivery whose message was settled, and its bytes
// released, before it (the stream's own fault: it is never asked).
var errSettled = errors.New("pulsarpool: delivery settled already")

// errNoDeadLetters: the subscriber was given no pool to publish dead letters with.
var errNoDeadLetters = errors.New("pulsarpool: no producer pool for dead letters")

// DeadLetter implements egress.DeadLetterer: the message (its payload, still held until
// it is settled, however egress trimmed the Delivery) is published to topic with its key
// and properties, plus its origin topic, subscription and id where it has no property of
// that name already (as the Java client does: a message dead-lettered before keeps its
// first origin). A message of a batch goes alone, with its own id. The copy is charged to the budget without
// waiting for room: the message is charged already and is settled right after, and the
// budget may be spent by this subscription's own queue, which only it would free.
func (s *subscription) DeadLetter(ctx context.Context, d *egress.Delivery, topic string) error {
	pool := s.owner.dlq
	if pool == nil {
		return errNoDeadLetters
	}
	h := d.Handle.(*handle)
	m := h.m
	// The payload is read (and copied) under the lock that settling takes, so it cannot be
	// released meanwhile, nor ever after: kept, its frame is left to the collector.
	s.mu.Lock()
	h.kept = true
	released := h.released
	var payload []byte
	if !released && m.Size() < streamFrom {
		payload = bytes.Clone(m.Payload())
	}
	s.mu.Unlock()
	if released {
		return fmt.Errorf("%w: message %s was settled already", errSettled, FormatID(m.ID))
	}
	props := make(map[string]string, len(m.Properties)+2)
	for k, v := range m.Properties {
		props[k] = v
	}
	origin := javaID(m.ID)
	for k, v := range map[string]string{PropertyRealTopic: m.Topic, PropertyRealSubscription: s.name,
		PropertyOriginMessageID: origin, PropertyOriginMessageIDLegacy: origin} {
		if _, ok := props[k]; !ok {
			props[k] = v
		}
	}
	if u := m.Undecodable; u != nil {
		props[PropertyUndecodableReason] = u.Reason.String()
		if st := m.Stored; st != nil {
			props[PropertyOriginMetadata] = base64.StdEncoding.EncodeToString(st.Metadata)
			if st.Compression != "" {
				props[PropertyOriginCompression] = st.Compression
				props[PropertyOriginUncompressedSize] = strconv.Itoa(st.UncompressedSize)
			}
			if st.NumMessages != 0 {
				props[PropertyOriginNumMessages] = strconv.Itoa(st.NumMessages)
			}
		}
	}
	msg := &ingress.Message{Topic: topic, Key: m.Key, Properties: props}
	if m.Size() >= streamFrom {
		_, err := pool.publishStream(ctx, msg, int64(m.Size()), m.Body(), true)
		return err
	}
	// A copy: the producer may hold it beyond this wait (ctx ending first), when the
	// delivery may be settled already.
	msg.Payload = payload
	done := make(chan error, 1)
	pool.publishAsync(ctx, msg, func(_ string, err error) { done <- err }, true)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// javaID writes a message id as the Java client's MessageId.toString does:
// ledger:entry:partition, with :batchIndex for a message of a batch.
func javaID(id pulsar.MessageID) string {
	s := fmt.Sprintf("%d:%d:%d", id.LedgerID, id.EntryID, id.Partition)
	if id.BatchIndex >= 0 {
		s += fmt.Sprintf(":%d", id.BatchIndex)
	}
	return s
}
