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
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Pool is the ingress Publisher: one Pulsar producer per topic, created on first use
// (concurrent first uses wait for the same creation), closed after it has been idle for
// IdleTimeout. Producers do not belong to a configuration snapshot, so a reload keeps
// every producer whose topic is still written to.
//
// A producer that fails for good is evicted, so the next record gets a fresh one; a
// failed creation is remembered for a backoff (1 s doubling to 30 s by default) during
// which the topic's records get its error at once. MaxProducers caps the live
// producers (templated topics): a new topic at the cap closes the idle producer used
// least recently, or waits for one to become idle. The Budget, when set, is charged
// with every record's bytes until its receipt, so a spent budget stops the ingress
// readers instead of growing memory.
type Pool struct {
	client *pulsar.Client
	opts   pulsar.ProducerOptions
	o      Options
	log    *slog.Logger

	mu   sync.Mutex
	m    map[string]*producerEntry
	live int // entries creating or holding a producer
	// Retired producers still to be closed (something was in flight on them).
	retiring map[*producerEntry]struct{}
	room     chan struct{} // closed and replaced when an entry becomes idle or leaves
	closed   bool
	// Reconnects counted by producers closed since, so the metric never goes back.
	retiredReconnects int64
	stop              chan struct{}
	wg                sync.WaitGroup
}

type producerEntry struct {
	topic    string
	ready    chan struct{} // closed once p or err is set
	p        *pulsar.Producer
	err      error     // the creation's error
	retryAt  time.Time // a failed creation is not tried again before
	failures int       // creations failed in a row (for the backoff)
	inflight int       // messages sent and not settled; under Pool.mu
	lastUse  time.Time // under Pool.mu
	retired  bool      // out of the map; closed once nothing is in flight
	closing  bool
}

// Options configure a Pool.
type Options struct {
	// Producer is the template of every producer (Topic is set per topic).
	Producer pulsar.ProducerOptions
	// CreateTimeout bounds one producer's creation.
	CreateTimeout time.Duration
	// IdleTimeout closes a producer that has had nothing to send for this long.
	IdleTimeout time.Duration
	// MaxProducers caps the live producers; 0 is no cap.
	MaxProducers int
	// CreateRetryMin and CreateRetryMax bound the backoff after a failed creation
	// (defaults 1 s and 30 s).
	CreateRetryMin, CreateRetryMax time.Duration
	// Budget is the process-wide byte budget records are charged to; nil is none.
	Budget *budget.Budget
	Logger *slog.Logger

	hook func(event, topic string) // tests: what the pool did
	now  func() time.Time          // tests: a fake clock for the backoff
}

// New starts a pool of producers of client.
func New(client *pulsar.Client, o Options) *Pool {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CreateRetryMin <= 0 {
		o.CreateRetryMin = time.Second
	}
	if o.CreateRetryMax < o.CreateRetryMin {
		o.CreateRetryMax = max(30*time.Second, o.CreateRetryMin)
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.hook == nil {
		o.hook = func(string, string) {}
	}
	ps := &Pool{client: client, opts: o.Producer, o: o, log: o.Logger,
		m: map[string]*producerEntry{}, retiring: map[*producerEntry]struct{}{}, room: make(chan struct{}), stop: make(chan struct{})}
	ps.wg.Add(1)
	go ps.reap()
	return ps
}

var errShuttingDown = fmt.Errorf("%w: the bridge is shutting down", ingress.ErrUnavailable)

// acquire returns the topic's producer, creating it if needed, and counts one use that
// release ends.
func (ps *Pool) acquire(ctx context.Context, topic string) (*producerEntry, error) {
	var capTimer <-chan time.Time
	for {
		ps.mu.Lock()
		if ps.closed {
			ps.mu.Unlock()
			return nil, errShuttingDown
		}
		e, ok := ps.m[topic]
		if ok && e.err != nil && !ps.o.now().Before(e.retryAt) {
			// The failed creation's backoff is over: try again.
			delete(ps.m, topic)
			ok = false
		}
		if !ok {
			if ps.o.MaxProducers > 0 && ps.live >= ps.o.MaxProducers && !ps.evictIdleLocked() {
				room := ps.room
				ps.mu.Unlock()
				if capTimer == nil {
					t := time.NewTimer(ps.o.CreateTimeout)
					defer t.Stop()
					capTimer = t.C
				}
				select {
				case <-room:
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-capTimer:
					return nil, fmt.Errorf("%w: %d producers are live and busy (pulsar.maxProducers); none became idle within %s",
						ingress.ErrUnavailable, ps.o.MaxProducers, ps.o.CreateTimeout)
				}
			}
			n := &producerEntry{topic: topic, ready: make(chan struct{})}
			if e != nil {
				n.failures = e.failures
			}
			e = n
			ps.m[topic] = e
			ps.live++
			ps.wg.Add(1)
			ps.o.hook("create", topic)
			go ps.create(e)
		}
		e.inflight++
		e.lastUse = ps.o.now()
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
}

// evictIdleLocked closes the live producer used least recently that has nothing in
// flight, to make room under the cap.
func (ps *Pool) evictIdleLocked() bool {
	var lru *producerEntry
	for _, e := range ps.m {
		if e.p == nil || e.inflight > 0 {
			continue
		}
		if lru == nil || e.lastUse.Before(lru.lastUse) {
			lru = e
		}
	}
	if lru == nil {
		return false
	}
	ps.o.hook("capped", lru.topic)
	ps.log.Info("closing the least recently used producer to stay within pulsar.maxProducers", "topic", lru.topic, "maxProducers", ps.o.MaxProducers)
	ps.retireLocked(lru)
	return true
}

// retireLocked takes e out of the map; it is closed once nothing is in flight on it.
func (ps *Pool) retireLocked(e *producerEntry) {
	if e.retired {
		return
	}
	e.retired = true
	if ps.m[e.topic] == e {
		delete(ps.m, e.topic)
	}
	ps.live--
	ps.wakeLocked()
	ps.retiring[e] = struct{}{}
	ps.closeIfDoneLocked(e)
}

func (ps *Pool) closeIfDoneLocked(e *producerEntry) {
	if !e.retired || e.closing || e.inflight > 0 || e.p == nil {
		return
	}
	ps.closeLocked(e)
}

// closeLocked closes e's producer in a goroutine of the pool.
func (ps *Pool) closeLocked(e *producerEntry) {
	e.closing = true
	delete(ps.retiring, e)
	ps.wg.Add(1)
	go func() {
		defer ps.wg.Done()
		_ = e.p.Close()
		ps.mu.Lock()
		ps.retiredReconnects += int64(e.p.Stats().Reconnects)
		ps.mu.Unlock()
		ps.o.hook("closed", e.topic)
	}()
}

func (ps *Pool) wakeLocked() {
	close(ps.room)
	ps.room = make(chan struct{})
}

func (ps *Pool) release(e *producerEntry) {
	ps.mu.Lock()
	e.inflight--
	e.lastUse = ps.o.now()
	if e.inflight == 0 {
		ps.wakeLocked()
		ps.closeIfDoneLocked(e)
	}
	ps.mu.Unlock()
}

// evict takes a producer that failed for good out of the pool, so the next record of its
// topic gets a new one.
func (ps *Pool) evict(e *producerEntry, cause error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e.retired || ps.closed {
		return
	}
	ps.o.hook("evicted", e.topic)
	ps.log.Warn("producer failed; the next record of its topic gets a new one", "topic", e.topic, "error", cause.Error())
	ps.retireLocked(e)
}

// failed reports whether err says the producer itself is finished (not the message).
func failed(err error) bool {
	return errors.Is(err, pulsar.ErrProducerFailed) || errors.Is(err, pulsar.ErrProducerClosed)
}

// create makes the producer. It is not bound to the request that asked first, so a
// client going away does not fail the creation for the others.
func (ps *Pool) create(e *producerEntry) {
	defer ps.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), ps.o.CreateTimeout)
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
	ps.mu.Lock()
	if err != nil {
		e.failures++
		wait := ps.o.CreateRetryMin << min(e.failures-1, 30)
		if wait <= 0 || wait > ps.o.CreateRetryMax {
			wait = ps.o.CreateRetryMax
		}
		e.retryAt = ps.o.now().Add(wait)
		e.err = ClassifyCreate(fmt.Errorf("creating the producer of %s: %w", e.topic, err))
		if !e.retired {
			e.retired = true // holds no producer: out of the cap's count, kept as the topic's cached failure
			ps.live--
			ps.wakeLocked()
		}
		ps.log.Warn("cannot create producer; the topic's records fail until the retry", "topic", e.topic, "retryIn", wait.String(), "error", err)
	} else {
		if ps.closed {
			// Close came first and did not see this producer: nobody gets it.
			e.err, e.retired = errShuttingDown, true
			ps.live--
			close(e.ready)
			ps.mu.Unlock()
			_ = p.Close()
			return
		}
		e.p = p
		ps.log.Info("producer created", "topic", e.topic, "partitions", p.Partitions())
	}
	close(e.ready)
	ps.mu.Unlock()
}

// PublishAsync implements ingress.Publisher.
func (ps *Pool) PublishAsync(ctx context.Context, m *ingress.Message, done func(string, error)) {
	size := int64(len(m.Payload))
	if err := ps.o.Budget.Acquire(ctx, size); err != nil {
		done("", budgetErr(err))
		return
	}
	e, err := ps.acquire(ctx, m.Topic)
	if err != nil {
		ps.o.Budget.Release(size)
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
		ps.o.Budget.Release(size)
		if err != nil && failed(err) {
			ps.evict(e, err)
		}
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

// budgetErr is the error of a record that could not be charged to the budget.
func budgetErr(err error) error {
	if errors.Is(err, budget.ErrClosed) {
		return errShuttingDown
	}
	return err
}

// largePayload is below any broker's message size limit (5 MiB by default).
const largePayload = 1 << 20

var messagePool = sync.Pool{New: func() any { return new(pulsar.ProducerMessage) }}

// PublishStream implements ingress.Publisher. The budget is charged with what the
// producer may hold of the message at once (its pending bytes), not the whole size.
func (ps *Pool) PublishStream(ctx context.Context, m *ingress.Message, size int64, r io.Reader) (string, error) {
	charge := size
	if lim := int64(ps.opts.MaxPendingBytes); lim > 0 {
		charge = min(charge, lim)
	}
	if err := ps.o.Budget.Acquire(ctx, charge); err != nil {
		return "", budgetErr(err)
	}
	defer ps.o.Budget.Release(charge)
	e, err := ps.acquire(ctx, m.Topic)
	if err != nil {
		return "", err
	}
	defer ps.release(e)
	id, err := e.p.SendStream(ctx, &pulsar.ProducerMessage{Key: m.Key, Properties: m.Properties}, size, r)
	if err != nil {
		if failed(err) {
			ps.evict(e, err)
		}
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

// ClassifyCreate is Classify for the error of a producer's creation: failing to reach
// a broker (dialing, the connection, the lookup, the deadline) is temporary, so only a
// broker's refusal that a retry cannot cure (authorization, an invalid or terminated
// topic) or invalid options are refused for good.
func ClassifyCreate(err error) error {
	var se *pulsar.ServerError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &se) && !se.Retryable(), errors.Is(err, pulsar.ErrInvalidTopic), errors.Is(err, pulsar.ErrInvalidOptions),
		errors.Is(err, pulsar.ErrHandshake):
		return fmt.Errorf("%w: %w", ingress.ErrRefused, err)
	}
	return fmt.Errorf("%w: %w", ingress.ErrUnavailable, err)
}

// reap closes producers idle for longer than IdleTimeout and forgets failed creations
// whose backoff ended that long ago.
func (ps *Pool) reap() {
	defer ps.wg.Done()
	every := min(max(ps.o.IdleTimeout/4, 5*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ps.stop:
			return
		case <-t.C:
			now := ps.o.now()
			ps.mu.Lock()
			for topic, e := range ps.m {
				switch {
				case e.err != nil && e.inflight == 0 && now.Sub(e.retryAt) > ps.o.IdleTimeout:
					delete(ps.m, topic)
				case e.p != nil && e.inflight == 0 && now.Sub(e.lastUse) > ps.o.IdleTimeout:
					ps.log.Info("closing idle producer", "topic", e.topic, "idle", ps.o.IdleTimeout)
					ps.o.hook("idle-closed", e.topic)
					ps.retireLocked(e)
				}
			}
			ps.mu.Unlock()
			ps.o.hook("reaped", "")
		}
	}
}

// Live is the number of producers being created or open.
func (ps *Pool) Live() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.live
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
// by its send timeout), waiting for the closes.
func (ps *Pool) Close() {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		ps.wg.Wait()
		return
	}
	ps.closed = true
	close(ps.stop)
	for _, e := range ps.m {
		if e.p != nil {
			e.retired = true
			ps.live--
			ps.retiring[e] = struct{}{}
		}
	}
	// Closed now, in flight or not: each producer's Close flushes what it holds. A
	// creation still running closes its producer when it ends.
	for e := range ps.retiring {
		if e.p != nil && !e.closing {
			ps.closeLocked(e)
		}
	}
	ps.m = map[string]*producerEntry{}
	ps.wakeLocked()
	ps.mu.Unlock()
	ps.wg.Wait()
}
