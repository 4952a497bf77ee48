// Package pulsarpool adapts the bridge's Pulsar client to ingress and egress: a pool of
// per-topic producers (created on first use, shared, closed when idle) that implements
// ingress.Publisher, and a subscriber that implements egress.Subscriber. It never
// imports the application that wires it.
package pulsarpool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Pool is the ingress Publisher: one Pulsar producer per topic, created on first
// use (concurrent first uses wait for the same creation), closed after it has been idle
// for idleTimeout. Producers do not belong to a configuration snapshot, so a reload
// keeps every producer whose topic is still written to.
type Pool struct {
	client *pulsar.Client
	opts   pulsar.ProducerOptions
	opTime time.Duration
	idle   time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	m      map[string]*producerEntry
	closed bool
	// Reconnects counted by producers closed since, so the metric never goes back.
	retiredReconnects int64
	stop              chan struct{}
	wg                sync.WaitGroup
}

type producerEntry struct {
	topic    string
	ready    chan struct{} // closed once p or err is set
	p        *pulsar.Producer
	err      error
	inflight int       // messages sent and not settled; under producers.mu
	lastUse  time.Time // under producers.mu
}

// Options configure a Pool.
type Options struct {
	// Producer is the template of every producer (Topic is set per topic).
	Producer pulsar.ProducerOptions
	// CreateTimeout bounds one producer's creation.
	CreateTimeout time.Duration
	// IdleTimeout closes a producer that has had nothing to send for this long.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// New starts a pool of producers of client.
func New(client *pulsar.Client, o Options) *Pool {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ps := &Pool{client: client, opts: o.Producer, opTime: o.CreateTimeout, idle: o.IdleTimeout, log: log,
		m: map[string]*producerEntry{}, stop: make(chan struct{})}
	ps.wg.Add(1)
	go ps.reap()
	return ps
}

// acquire returns the topic's producer, creating it if needed, and counts one use that
// release ends.
func (ps *Pool) acquire(ctx context.Context, topic string) (*producerEntry, error) {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return nil, fmt.Errorf("%w: the bridge is shutting down", ingress.ErrUnavailable)
	}
	e, ok := ps.m[topic]
	if !ok {
		e = &producerEntry{topic: topic, ready: make(chan struct{})}
		ps.m[topic] = e
		ps.wg.Add(1)
		go ps.create(e)
	}
	e.inflight++
	e.lastUse = time.Now()
	ps.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		ps.release(e)
		return nil, ctx.Err()
	}
	if e.err != nil {
		ps.release(e)
		return nil, e.err
	}
	return e, nil
}

func (ps *Pool) release(e *producerEntry) {
	ps.mu.Lock()
	e.inflight--
	e.lastUse = time.Now()
	ps.mu.Unlock()
}

// create makes the producer. It is not bound to the request that asked first, so a
// client going away does not fail the creation for the others.
func (ps *Pool) create(e *producerEntry) {
	defer ps.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), ps.opTime)
	defer cancel()
	go func() {
		select {
		case <-ps.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	opts := ps.opts
	opts.Topic = e.topic
	p, err := ps.client.CreateProducer(ctx, opts)
	if err != nil {
		e.err = Classify(fmt.Errorf("creating the producer of %s: %w", e.topic, err))
		ps.log.Warn("cannot create producer", "topic", e.topic, "error", err)
		ps.mu.Lock()
		if ps.m[e.topic] == e {
			delete(ps.m, e.topic) // the next record tries again
		}
		ps.mu.Unlock()
	} else {
		e.p = p
		ps.log.Info("producer created", "topic", e.topic, "partitions", p.Partitions())
	}
	close(e.ready)
}

// PublishAsync implements ingress.Publisher.
func (ps *Pool) PublishAsync(ctx context.Context, m *ingress.Message, done func(string, error)) {
	e, err := ps.acquire(ctx, m.Topic)
	if err != nil {
		done("", err)
		return
	}
	payload, props := m.Payload, m.Properties
	if len(payload) > largePayload {
		// A payload above the broker's limit is chunked in the background from the message
		// given, and ingress reuses its read buffer and may reuse the properties map: give
		// the producer its own copies.
		payload, props = bytes.Clone(payload), maps.Clone(props)
	}
	pm := messagePool.Get().(*pulsar.ProducerMessage)
	*pm = pulsar.ProducerMessage{Payload: payload, Key: m.Key, Properties: props}
	e.p.SendAsync(ctx, pm, func(id pulsar.MessageID, err error) {
		ps.release(e)
		if err != nil {
			done("", Classify(err))
			return
		}
		done(FormatID(id), nil)
	})
	*pm = pulsar.ProducerMessage{}
	messagePool.Put(pm) // SendAsync does not keep it
}

// largePayload is below any broker's message size limit (5 MiB by default).
const largePayload = 1 << 20

var messagePool = sync.Pool{New: func() any { return new(pulsar.ProducerMessage) }}

// PublishStream implements ingress.Publisher.
func (ps *Pool) PublishStream(ctx context.Context, m *ingress.Message, size int64, r io.Reader) (string, error) {
	e, err := ps.acquire(ctx, m.Topic)
	if err != nil {
		return "", err
	}
	defer ps.release(e)
	id, err := e.p.SendStream(ctx, &pulsar.ProducerMessage{Key: m.Key, Properties: m.Properties}, size, r)
	if err != nil {
		return "", Classify(err)
	}
	return FormatID(id), nil
}

// FormatID writes ledger:entry:partition:batchIndex, as pulsar.MessageID.String does,
// without fmt.
func FormatID(id pulsar.MessageID) string {
	var b [64]byte
	s := strconv.AppendInt(b[:0], id.LedgerID, 10)
	s = append(s, ':')
	s = strconv.AppendInt(s, id.EntryID, 10)
	s = append(s, ':')
	s = strconv.AppendInt(s, int64(id.Partition), 10)
	s = append(s, ':')
	s = strconv.AppendInt(s, int64(id.BatchIndex), 10)
	return string(s)
}

// Classify wraps a Pulsar error in the ingress error that decides the HTTP status.
func Classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, pulsar.ErrMessageTooLarge):
		return fmt.Errorf("%w: %w", ingress.ErrTooLarge, err)
	case pulsar.IsRetryable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, pulsar.ErrProducerClosed),
		errors.Is(err, pulsar.ErrClientClosed):
		return fmt.Errorf("%w: %w", ingress.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", ingress.ErrRefused, err)
}

// reap closes producers idle for longer than ps.idle.
func (ps *Pool) reap() {
	defer ps.wg.Done()
	every := min(max(ps.idle/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ps.stop:
			return
		case now := <-t.C:
			var idle []*producerEntry
			ps.mu.Lock()
			for topic, e := range ps.m {
				select {
				case <-e.ready:
				default:
					continue
				}
				if e.inflight == 0 && e.p != nil && now.Sub(e.lastUse) > ps.idle {
					delete(ps.m, topic)
					idle = append(idle, e)
				}
			}
			ps.mu.Unlock()
			for _, e := range idle {
				ps.log.Info("closing idle producer", "topic", e.topic, "idle", ps.idle)
				_ = e.p.Close()
				ps.mu.Lock()
				ps.retiredReconnects += int64(e.p.Stats().Reconnects)
				ps.mu.Unlock()
			}
		}
	}
}

// Stats sums the producers' figures for the metrics.
func (ps *Pool) Stats() telemetry.PulsarStats {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	s := telemetry.PulsarStats{ProducerReconnects: ps.retiredReconnects}
	for _, e := range ps.m {
		select {
		case <-e.ready: // e.p is set before ready closes
		default:
			continue
		}
		if e.p == nil {
			continue
		}
		st := e.p.Stats()
		s.PendingMessages += int64(st.PendingMessages)
		s.PendingBytes += int64(st.PendingBytes)
		s.ProducerReconnects += int64(st.Reconnects)
	}
	return s
}

// Close stops the reaper and closes every producer (each flushes what it holds, bounded
// by its send timeout).
func (ps *Pool) Close() {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return
	}
	ps.closed = true
	close(ps.stop)
	all := ps.m
	ps.m = map[string]*producerEntry{}
	ps.mu.Unlock()
	ps.wg.Wait()
	var wg sync.WaitGroup
	for _, e := range all {
		if e.p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.p.Close()
			}()
		}
	}
	wg.Wait()
}
