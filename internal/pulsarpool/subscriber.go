package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Subscriber is the egress Subscriber: one consumer of the bridge's client per stream
// (they share the client's broker connections).
type Subscriber struct {
	client *pulsar.Client
	mu     sync.Mutex
	open   map[*subscription]struct{}
	// What closed consumers counted, so the metrics' counters never go back.
	retiredReconnects, retiredPermits int64
}

// NewSubscriber returns the egress Subscriber of c.
func NewSubscriber(c *pulsar.Client) *Subscriber {
	return &Subscriber{client: c, open: map[*subscription]struct{}{}}
}

// AddStats adds the egress consumers' figures to st.
func (s *Subscriber) AddStats(st *telemetry.PulsarStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.ConsumerReconnects += s.retiredReconnects
	st.PermitsGranted += s.retiredPermits
	for sub := range s.open {
		cs := sub.c.Stats()
		st.ConsumerReconnects += int64(cs.Reconnects)
		st.PermitsGranted += int64(cs.PermitsGranted)
		st.Buffered += int64(sub.c.Buffered())
	}
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
	c, err := s.client.Subscribe(ctx, pulsar.ConsumerOptions{Topics: o.Topics, Subscription: o.Subscription, Type: subTypes[o.Type],
		InitialPosition: pos, ReceiverQueueSize: o.ReceiverQueue,
		// A message nacked after its acknowledgement timeout comes back soon, not in a minute.
		NackRedeliveryDelay: time.Second,
		// Acknowledge single messages of a batch (PIP-54), so a redelivered batch brings
		// back only what was not acknowledged. A broker without
		// acknowledgmentAtBatchIndexLevelEnabled ignores the ack_set and redelivers whole
		// batches (duplicates, never loss).
		BatchIndexAck: true})
	if err != nil {
		var se *pulsar.ServerError
		switch {
		case errors.As(err, &se) && se.Code == pulsar.CodeConsumerBusy:
			return nil, fmt.Errorf("%w: subscription %s (%s) already has its consumer: %v", egress.ErrBusy, o.Subscription, o.Type, err)
		case errors.As(err, &se) && !se.Retryable(), errors.Is(err, pulsar.ErrInvalidTopic), errors.Is(err, pulsar.ErrInvalidOptions),
			errors.Is(err, pulsar.ErrHandshake), errors.Is(err, context.Canceled):
			return nil, err
		}
		// Not reaching a broker (dialing, the connection, the lookup, the deadline) is
		// temporary, as it is for producers.
		return nil, fmt.Errorf("%w: %w", egress.ErrUnavailable, err)
	}
	sub := &subscription{c: c, owner: s}
	s.mu.Lock()
	s.open[sub] = struct{}{}
	s.mu.Unlock()
	return sub, nil
}

type subscription struct {
	c     *pulsar.Consumer
	owner *Subscriber
}

// streamFrom is the payload size from which a message goes to egress as a Body: a
// reassembled chunked message is then written from its chunks, never joined in memory.
const streamFrom = 32 << 10

func delivery(m *pulsar.Message) *egress.Delivery {
	d := &egress.Delivery{ID: FormatID(m.ID), Topic: m.Topic, Key: m.Key, Properties: m.Properties, PublishTime: m.PublishTime,
		EventTime: m.EventTime, Redeliveries: m.RedeliveryCount, Handle: m}
	if m.Size() >= streamFrom {
		d.Body, d.Size = m.Body(), int64(m.Size())
	} else {
		d.Payload = m.Payload()
	}
	return d
}

func (s *subscription) Receive(ctx context.Context) (*egress.Delivery, error) {
	m, err := s.c.Receive(ctx)
	if err != nil {
		if errors.Is(err, pulsar.ErrEndOfTopic) {
			return nil, fmt.Errorf("%w: %w", egress.ErrEndOfTopic, err)
		}
		return nil, err
	}
	return delivery(m), nil
}

func (s *subscription) TryReceive() (*egress.Delivery, bool) {
	m, ok := s.c.TryReceive()
	if !ok {
		return nil, false
	}
	return delivery(m), true
}

func (s *subscription) Ack(d *egress.Delivery) error { return s.c.Ack(d.Handle.(*pulsar.Message)) }
func (s *subscription) Nack(d *egress.Delivery)      { s.c.Nack(d.Handle.(*pulsar.Message)) }
func (s *subscription) Close() error {
	err := s.c.Close()
	cs := s.c.Stats()
	o := s.owner
	o.mu.Lock()
	if _, ok := o.open[s]; ok {
		delete(o.open, s)
		o.retiredReconnects += int64(cs.Reconnects)
		o.retiredPermits += int64(cs.PermitsGranted)
	}
	o.mu.Unlock()
	return err
}
