// Package pulsarpool adapts the bridge's Pulsar client to ingress and egress: a pool of
// per-topic producers (created on first use, shared, closed when idle) that implements
// ingress.Publisher, and a subscriber that implements egress.Subscriber. It never
// imports the application that wires it.
package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/backoff"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/internal/schema"
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
	// cut ends the producers' flushes at once: CloseContext's ctx ended.
	cut    context.Context
	cutNow context.CancelFunc
	// claims are the named streams being published, by producer name.
	claims map[string]*claim
}

// claim is one request's hold on a named stream.
type claim struct {
	// dead holds, by topic, the temporary failure that stopped the stream there.
	dead map[string]error
}

type producerEntry struct {
	topic  string
	name   string         // a named stream's producer name (deduplication); "" for the topic's shared producer
	schema *schema.Schema // what the producer declares; nil: none
	ready  chan struct{}  // closed once p or err is set
	p      *pulsar.Producer
	// lease is a named stream's lease on a partitioned topic (shared access mode): see
	// createLease. Created before p, closed after it; nil for every other producer.
	lease    *pulsar.Producer
	err      error     // the creation's error
	retryAt  time.Time // a failed creation is not tried again before
	failures int       // creations failed in a row (for the backoff)
	inflight int       // messages sent and not settled; under Pool.mu
	lastUse  time.Time // when inflight last fell to 0; under Pool.mu
	retired  bool      // out of the map; closed once nothing is in flight
	closing  bool
}

// key is e's key in Pool.m.
func (e *producerEntry) key() string { return entryKey(e.topic, e.name, e.schema) }

// entryKey is a producer's key: its topic, a named stream's name, and its schema (a
// reload that changes a topic's schema gets a producer declaring the new one).
func entryKey(topic, name string, s *schema.Schema) string {
	if name == "" && s == nil {
		return topic
	}
	return topic + "\x00" + name + "\x00" + s.Key()
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
	// NamedAccessMode is the access mode of named streams' producers [pulsar.AccessShared]:
	// with pulsar.AccessExclusiveWithFencing a request that takes a stream over from
	// another bridge process fences that process's producers of it at once (their records
	// in flight fail with ingress.ErrTakenOver); the broker then lets no other producer
	// publish to the topic while the stream's is open.
	NamedAccessMode pulsar.ProducerAccessMode
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
		m: map[string]*producerEntry{}, claims: map[string]*claim{}, retiring: map[*producerEntry]struct{}{}, room: make(chan struct{}), stop: make(chan struct{})}
	ps.cut, ps.cutNow = context.WithCancel(context.Background())
	ps.wg.Add(1)
	go ps.reap()
	return ps
}

var errShuttingDown = fmt.Errorf("%w: the bridge is shutting down", ingress.ErrUnavailable)

// acquire returns the topic's producer (name: a named stream's, which must be claimed),
// creating it if needed, and counts one use that release ends.
func (ps *Pool) acquire(ctx context.Context, topic, name string, sch *schema.Schema) (*producerEntry, error) {
	var capTimer <-chan time.Time
	key := entryKey(topic, name, sch)
	for {
		ps.mu.Lock()
		if ps.closed {
			ps.mu.Unlock()
			return nil, errShuttingDown
		}
		if name != "" {
			if err := ps.claimErrLocked(topic, name); err != nil {
				ps.mu.Unlock()
				return nil, err
			}
		}
		e, ok := ps.m[key]
		if ok && e.err != nil && !ps.o.now().Before(e.retryAt) {
			// The failed creation's backoff is over: try again.
			delete(ps.m, key)
			ok = false
		}
		if ok && e.lease != nil && e.lease.Err() != nil {
			// Another bridge process took the stream's lease while its connection was
			// down: this request's stream ends on the topic, its records unsent, as after
			// any temporary failure (503: a client still here resends them, once the
			// other request has ended). See createLease.
			lerr := e.lease.Err()
			ps.o.hook("lease-lost", e.topic)
			ps.log.Warn("a named stream lost its lease to another producer; its records on the topic fail until its next request",
				"topic", e.topic, "stream", name, "error", lerr.Error())
			ps.retireLocked(e)
			ps.mu.Unlock()
			return nil, ps.stopNamedAt(name, topic, Classify(fmt.Errorf("the named stream %s lost its lease on %s: %w", name, topic, lerr)))
		}
		if ok && e.p != nil && e.p.Err() != nil {
			// It stopped for good while nothing was sent: the record gets a new one
			// instead of its error, unless another request took the named stream over
			// meanwhile (fenced while idle), which ends this request's stream there as a
			// record that was in flight would have.
			perr := e.p.Err()
			ps.o.hook("evicted", e.topic)
			ps.retireLocked(e)
			if name != "" && errors.Is(perr, pulsar.ErrProducerFenced) {
				ps.mu.Unlock()
				return nil, ps.stopNamedAt(name, topic, Classify(perr))
			}
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
			n := &producerEntry{topic: topic, name: name, schema: sch, ready: make(chan struct{})}
			if e != nil {
				n.failures = e.failures
			}
			e = n
			ps.m[key] = e
			ps.live++
			ps.wg.Add(1)
			ps.o.hook("create", topic)
			go ps.create(e)
		}
		e.inflight++ // lastUse is read only while nothing is in flight: release sets it
		ps.mu.Unlock()
		select {
		case <-e.ready:
			// Created already, as for every record but a producer's first few: a
			// receive from a closed channel alone takes no lock, where the select below
			// locked both channels (and sorted them) for every record, 5 % of the
			// ingress path's CPU at saturation.
		default:
			select {
			case <-e.ready:
			case <-ctx.Done():
				ps.release(e)
				return nil, ctx.Err()
			}
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
	if ps.m[e.key()] == e {
		delete(ps.m, e.key())
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
		_ = e.p.CloseContext(ps.cut)
		reconnects := int64(e.p.Stats().Reconnects)
		if e.lease != nil {
			// Only now: the stream is excluded elsewhere until its producer has flushed.
			_ = e.lease.CloseContext(ps.cut)
			reconnects += int64(e.lease.Stats().Reconnects)
		}
		ps.mu.Lock()
		ps.retiredReconnects += reconnects
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
	if e.inflight == 0 {
		// The clock is read when the producer becomes idle, not for every record: idle
		// eviction and the cap's least-recently-used choice look only at producers with
		// nothing in flight.
		e.lastUse = ps.o.now()
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
	opts.Schema = e.schema.Info()
	partitions := -1
	var err error
	var lease *pulsar.Producer
	if e.name != "" {
		opts.Name, opts.Deduplication, opts.AccessMode = e.name, true, ps.o.NamedAccessMode
		if partitions, err = ps.client.Partitions(ctx, e.topic); err == nil && partitions > 0 {
			opts.Name = partitionedName(e.name, partitions)
			opts.PartitionsRefreshInterval = -1 // the name is the count's: see partitionedName
			if ps.o.NamedAccessMode == pulsar.AccessShared {
				lease, err = ps.createLease(ctx, e)
			}
		}
	}
	var p *pulsar.Producer
	if err == nil {
		p, err = ps.client.CreateProducer(ctx, opts)
	}
	if err == nil && partitions > 0 && p.Partitions() != partitions {
		_ = p.CloseContext(ps.cut)
		p, err = nil, fmt.Errorf("%w: the topic went from %d to %d partitions while its producer was created", pulsar.ErrLookup, partitions, p.Partitions())
	}
	if err != nil && lease != nil {
		_ = lease.CloseContext(ps.cut)
		lease = nil
	}
	ps.mu.Lock()
	if err != nil {
		e.failures++
		wait := backoff.Schedule{Initial: ps.o.CreateRetryMin, Multiplier: 2, Max: ps.o.CreateRetryMax}.Delay(e.failures-1, 0)
		e.retryAt = ps.o.now().Add(wait)
		e.err = ClassifyCreate(createError(e, err))
		if !e.retired {
			e.retired = true // holds no producer: out of the cap's count, kept as the topic's cached failure
			ps.live--
			ps.wakeLocked()
		}
		if e.name != "" && ps.claims[e.name] == nil && ps.m[e.key()] == e {
			// The stream's request ended while this was created: the failure is not
			// kept for its next request (see retireNamedLocked).
			delete(ps.m, e.key())
		}
		ps.log.Warn("cannot create producer; the topic's records fail until the retry", "topic", e.topic, "retryIn", wait.String(), "error", err)
	} else {
		if ps.closed {
			// Close came first and did not see this producer: nobody gets it.
			e.err, e.retired = errShuttingDown, true
			ps.live--
			close(e.ready)
			ps.mu.Unlock()
			_ = p.CloseContext(ps.cut)
			if lease != nil {
				_ = lease.CloseContext(ps.cut)
			}
			return
		}
		e.p, e.lease = p, lease
		ps.log.Info("producer created", "topic", e.topic, "partitions", p.Partitions())
		if e.name != "" && ps.claims[e.name] == nil {
			// The stream's request ended while this producer was created: it closes
			// now, as its request's others did (see retireNamedLocked), once the
			// records waiting for it have their answers.
			ps.o.hook("released", e.topic)
			ps.retireLocked(e)
		}
	}
	close(e.ready)
	ps.mu.Unlock()
}

// createLease registers the lease of a named stream (e) on a partitioned topic, with
// shared producers: a producer of the stream's own name, without the partition count
// (see partitionedName), on partition 0, which every count has. It never sends, so it
// touches no deduplication state (the broker keeps sequence ids per name, and its name is
// none of the stream's producers'); it is held until the stream's producer has closed.
// The broker lets one producer hold a name on a topic, so a request of the same stream on
// another bridge process is refused (ProducerBusy, 503) while this one holds it, whatever
// partition count either producer was created with: the exclusion the count-bearing
// names of the stream's producers alone would lose while partitions are being added.
//
// It reconnects as any producer does. If another process took the name while its
// connection was down (the broker refuses a name only while the connection holding it
// is alive), its registration is refused with ProducerBusy and it fails for good
// (FailWhenNameBusy): acquire then ends the stream on the topic, unsent, as after any
// temporary failure. Until that refusal, records already queued may still be written.
func (ps *Pool) createLease(ctx context.Context, e *producerEntry) (*pulsar.Producer, error) {
	topic, err := pulsar.TopicName(e.topic)
	if err != nil {
		return nil, err
	}
	opts := ps.opts
	opts.Topic = pulsar.PartitionTopic(topic, 0)
	opts.Name, opts.Deduplication, opts.AccessMode, opts.FailWhenNameBusy = e.name, false, pulsar.AccessShared, true
	opts.Schema = e.schema.Info() // a namespace enforcing schemas refuses a producer without the topic's
	opts.PartitionsRefreshInterval = -1
	lease, err := ps.client.CreateProducer(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("the named stream's lease (producer %s on partition 0): %w", e.name, err)
	}
	return lease, nil
}

var messagePool = sync.Pool{New: func() any { return new(pulsar.ProducerMessage) }}

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
		if e.lease != nil {
			s.ProducerReconnects += int64(e.lease.Stats().Reconnects)
		}
	}
	return s
}

// Close stops the reaper and closes every producer (each flushes what it holds, bounded
// by its send timeout), waiting for the closes.
func (ps *Pool) Close() { ps.CloseContext(context.Background()) }

// CloseContext is Close with every producer's flush also bounded by ctx, those closing
// already (idle or evicted) included: when ctx ends, what the producers still hold is
// failed at once and CloseContext returns promptly.
func (ps *Pool) CloseContext(ctx context.Context) {
	stop := context.AfterFunc(ctx, ps.cutNow)
	defer stop()
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
