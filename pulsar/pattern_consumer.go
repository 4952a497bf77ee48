package pulsar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Discovery states of a pattern's Consumer (ConsumerStats.Discovery).
const (
	// DiscoveryWatching: the broker's topic-list watcher reports changes as they happen
	// (and the namespace is still listed every DiscoveryInterval).
	DiscoveryWatching = "watching"
	// DiscoveryReconnecting: the watcher's connection was lost; it registers again with
	// backoff and the namespace is listed again once it has.
	DiscoveryReconnecting = "reconnecting"
	// DiscoveryPolling: the broker offers no watcher (its
	// enableBrokerSideSubscriptionPatternEvaluation is off) or refused one: the
	// namespace is listed every DiscoveryInterval.
	DiscoveryPolling = "polling"
)

// discovery keeps a pattern's Consumer subscribed to the topics the pattern matches:
// it lists the namespace when the consumer starts, registers a topic-list watcher where
// the broker has them, applies what the watcher reports, lists again after every loss
// of the watcher and every DiscoveryInterval in any case (a broker's watcher misses
// changes while its metadata session is down), and removes the consumers of topics that
// are gone. Every change of the topics consumed is made on its goroutine.
type discovery struct {
	c   *Consumer
	pat *TopicsPattern

	// members is every topic consumed (partitioned ones by their own name); hash is
	// the broker's hash of the list last applied in full ("" when something of it could
	// not be subscribed, so the next listing is applied again). Owned by run.
	members map[string]struct{}
	hash    string

	mu    sync.Mutex
	state string
	watch *topicWatch
	// registering is the watcher being registered: its updates are kept and its loss
	// noted (lostEarly) before register takes it as watch, as both can reach the
	// connection's reader before the broker's answer reaches register.
	registering *topicWatch
	lostEarly   bool
	noWatch     bool // the broker has no watchers, or refused one for good
	pending     []topicChange
	gone        map[string]struct{} // topics whose consumer found them deleted
	added       int
	removed     int
	wake        chan struct{}
}

// topicChange is a watcher's update.
type topicChange struct{ added, deleted []string }

// subscribePattern subscribes cons to the topics its pattern matches now, then starts
// the discovery.
func (c *Client) subscribePattern(ctx context.Context, cons *Consumer) (*Consumer, error) {
	d := &discovery{c: cons, pat: cons.opts.TopicsPattern, members: map[string]struct{}{},
		state: DiscoveryPolling, gone: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	cons.discovery = d
	var l topicList
	err := creationRetry(ctx, c.closing, cons.opts.Backoff, func() error {
		var err error
		l, err = c.listTopics(ctx, d.pat, "")
		return err
	})
	if err == nil {
		err = d.reconcile(ctx, l, cons.opts.InitialPosition == Earliest)
		d.added = 0 // counted from here on: the topics found after the start
	}
	if err != nil {
		cons.Close()
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cons.Close()
		return nil, ErrClientClosed
	}
	c.consumers[cons] = struct{}{}
	c.mu.Unlock()
	cons.wg.Add(1)
	go d.run()
	if cons.opts.PartitionsRefreshInterval > 0 {
		cons.wg.Add(1)
		go cons.watchPartitions()
	}
	c.log.Info("pattern consumer started", "pattern", d.pat.String(), "subscription", cons.opts.Subscription, "topics", len(d.members))
	return cons, nil
}

// reconcile makes the topics consumed those of l: it subscribes to the new ones (at
// their earliest message when earliest), subscribes to partitions added to a
// partitioned topic, and closes the consumers of topics no longer listed. A topic that
// cannot be subscribed now is tried again at the next listing; the first such error is
// returned unless the topic was deleted meanwhile.
func (d *discovery) reconcile(ctx context.Context, l topicList, earliest bool) error {
	want := map[string]int{} // topic -> partitions listed (0: not partitioned)
	for _, name := range l.topics {
		base, i := splitPartition(name)
		want[base] = max(want[base], i+1)
	}
	var first error
	complete := true
	for _, base := range slices.Sorted(maps.Keys(want)) {
		if _, ok := d.members[base]; ok {
			d.c.topicsMu.Lock()
			known, partitioned := d.c.partitioned[base]
			d.c.topicsMu.Unlock()
			if partitioned && want[base] > known {
				d.c.growTo(base, known)
			}
			continue
		}
		err := d.c.addTopic(ctx, base, earliest)
		switch {
		case err == nil:
			d.members[base] = struct{}{}
			d.count(1, 0)
			d.c.client.log.Info("pattern matched a topic; subscribed", "pattern", d.pat.String(), "topic", base)
		case topicNotFound(err):
			// Deleted since it was listed: nothing to consume.
		default:
			complete = false
			if first == nil {
				first = err
			}
			d.c.client.log.Warn("subscribing to a topic the pattern matched failed; retrying at the next listing",
				"pattern", d.pat.String(), "topic", base, "error", err)
		}
	}
	for base := range d.members {
		if _, ok := want[base]; !ok {
			d.remove(base, "no longer listed")
		}
	}
	d.hash = ""
	if complete {
		d.hash = l.hash
	}
	return first
}

func (d *discovery) remove(base, why string) {
	if _, ok := d.members[base]; !ok {
		return
	}
	delete(d.members, base)
	d.c.removeTopic(base)
	d.count(0, 1)
	d.c.client.log.Info("pattern topic gone; its consumer closed", "pattern", d.pat.String(), "topic", base, "why", why)
}

func (d *discovery) count(added, removed int) {
	d.mu.Lock()
	d.added += added
	d.removed += removed
	d.mu.Unlock()
}

func (d *discovery) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// topicGone is told by a partition's consumer that its topic no longer exists.
func (d *discovery) topicGone(base string) {
	d.mu.Lock()
	d.gone[base] = struct{}{}
	d.mu.Unlock()
	d.signal()
}

func (d *discovery) watchUpdate(w *topicWatch, added, deleted []string, hash string) {
	d.mu.Lock()
	if d.watch == w || d.registering == w {
		d.pending = append(d.pending, topicChange{added: filterTopics(d.pat, added), deleted: deleted})
	}
	d.mu.Unlock()
	d.signal()
}

func (d *discovery) watchLost(w *topicWatch, reason error) {
	d.mu.Lock()
	if d.registering == w {
		d.lostEarly = true
	}
	lost := d.watch == w
	if lost {
		d.watch = nil
		d.state = DiscoveryReconnecting
	}
	d.mu.Unlock()
	if lost {
		d.c.client.log.Warn("topic-list watcher lost; registering it again", "pattern", d.pat.String(), "reason", reason)
		d.signal()
	}
}

func (d *discovery) run() {
	defer d.c.wg.Done()
	interval := d.c.opts.DiscoveryInterval
	relist := time.NewTimer(interval)
	defer relist.Stop()
	attempts := 0
	registered := false // a watcher was registered before: listing again after a loss
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		var retryC <-chan time.Time
		if d.wantWatch() {
			if retry == nil { // no wait pending: try now
				if d.register(registered) {
					attempts, registered = 0, true
				} else if d.wantWatch() {
					retry = time.NewTimer(d.c.opts.Backoff.delay(attempts))
					attempts++
				}
			}
			if retry != nil {
				retryC = retry.C
			}
		}
		select {
		case <-d.c.stop:
			d.mu.Lock()
			w := d.watch
			d.watch = nil
			d.mu.Unlock()
			if w != nil {
				ctx, cancel := context.WithTimeout(d.c.cut, time.Second)
				w.close(ctx, d.c.client)
				cancel()
			}
			return
		case <-relist.C:
			d.list()
			relist.Reset(interval)
		case <-retryC:
			retry = nil
		case <-d.wake:
			d.apply()
		}
	}
}

// wantWatch reports whether a watcher is to be registered: none is, and the broker
// may have one.
func (d *discovery) wantWatch() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.noWatch && d.watch == nil
}

// register registers the topic-list watcher and applies the list it comes with; after
// a loss (again), the namespace is listed as well.
func (d *discovery) register(again bool) bool {
	ctx, cancel := contextUntil(d.c.stop)
	defer cancel()
	ctx, cancelOp := context.WithTimeout(ctx, d.c.client.opts.OperationTimeout)
	defer cancelOp()
	w := &topicWatch{d: d, id: d.c.client.watcherID.Add(1)}
	d.mu.Lock()
	d.registering, d.lostEarly = w, false
	d.mu.Unlock()
	l, err := d.c.client.watchTopics(ctx, w, d.pat, d.hash)
	d.mu.Lock()
	if err == nil && d.lostEarly {
		err = fmt.Errorf("the watcher's connection closed as it registered: %w", ErrConnectionClosed)
	}
	d.registering, d.lostEarly = nil, false
	d.mu.Unlock()
	if err != nil {
		if errors.Is(err, errNoWatchers) || errors.Is(err, ErrTopicListRefused) {
			d.mu.Lock()
			d.noWatch, d.state = true, DiscoveryPolling
			d.mu.Unlock()
			d.c.client.log.Info("topics of the pattern discovered by listing its namespace", "pattern", d.pat.String(),
				"interval", d.c.opts.DiscoveryInterval, "why", err)
			return false
		}
		d.c.client.log.Warn("registering the topic-list watcher failed", "pattern", d.pat.String(), "error", err)
		d.mu.Lock()
		d.state = DiscoveryReconnecting
		d.mu.Unlock()
		return false
	}
	d.mu.Lock()
	if d.noWatch || d.watch != nil {
		d.mu.Unlock()
		return true
	}
	d.watch, d.state = w, DiscoveryWatching
	d.mu.Unlock()
	if l.changed {
		_ = d.reconcile(ctx, l, !d.c.opts.NewTopicsLatest)
	}
	if again {
		d.list()
	}
	return true
}

// list lists the namespace and applies what changed.
func (d *discovery) list() {
	ctx, cancel := contextUntil(d.c.stop)
	defer cancel()
	ctx, cancelOp := context.WithTimeout(ctx, d.c.client.opts.OperationTimeout)
	defer cancelOp()
	l, err := d.c.client.listTopics(ctx, d.pat, d.hash)
	if err != nil {
		d.c.client.log.Warn("listing the pattern's namespace failed; trying again at the next interval", "pattern", d.pat.String(), "error", err)
		return
	}
	if !l.changed {
		return
	}
	_ = d.reconcile(ctx, l, !d.c.opts.NewTopicsLatest)
}

// apply applies the watcher's updates and the topics found gone.
func (d *discovery) apply() {
	d.mu.Lock()
	pending, gone := d.pending, d.gone
	d.pending, d.gone = nil, map[string]struct{}{}
	d.mu.Unlock()
	if len(gone) > 0 {
		for base := range gone {
			d.remove(base, "deleted")
		}
		// It may have been created again: the listing says.
		d.hash = ""
		d.list()
	}
	if len(pending) == 0 {
		return
	}
	ctx, cancel := contextUntil(d.c.stop)
	defer cancel()
	ctx, cancelOp := context.WithTimeout(ctx, d.c.client.opts.OperationTimeout)
	defer cancelOp()
	d.hash = "" // the watcher's hash is of the broker's list, which the next listing compares
	for _, ch := range pending {
		for _, name := range ch.deleted {
			base, _ := splitPartition(name)
			d.remove(base, "deleted")
		}
		added := map[string]int{}
		for _, name := range ch.added {
			base, i := splitPartition(name)
			added[base] = max(added[base], i+1)
		}
		for _, base := range slices.Sorted(maps.Keys(added)) {
			if _, ok := d.members[base]; ok {
				d.c.topicsMu.Lock()
				known, partitioned := d.c.partitioned[base]
				d.c.topicsMu.Unlock()
				if partitioned && added[base] > known {
					d.c.growTo(base, known)
				}
				continue
			}
			err := d.c.addTopic(ctx, base, !d.c.opts.NewTopicsLatest)
			switch {
			case err == nil:
				d.members[base] = struct{}{}
				d.count(1, 0)
				d.c.client.log.Info("pattern matched a new topic; subscribed", "pattern", d.pat.String(), "topic", base)
			case topicNotFound(err):
			default:
				d.c.client.log.Warn("subscribing to a new topic the pattern matched failed; retrying at the next listing",
					"pattern", d.pat.String(), "topic", base, "error", err)
			}
		}
	}
}

// stats fills a pattern consumer's part of ConsumerStats.
func (d *discovery) stats(s *ConsumerStats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.Discovery, s.TopicsAdded, s.TopicsRemoved = d.state, d.added, d.removed
}

// topicNotFound reports whether err is the broker's TopicNotFound.
func topicNotFound(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && pb.ServerError(se.Code) == pb.ServerError_TopicNotFound
}

// baseTopic is the topic p's partition belongs to.
func (p *partitionConsumer) baseTopic() string {
	if p.partition < 0 {
		return p.topic
	}
	base, _ := splitPartition(p.topic)
	return base
}

// addTopic subscribes to topic (every partition of it) with its subscription starting
// at the earliest message when earliest; the topic is not created (a pattern's).
func (c *Consumer) addTopic(ctx context.Context, topic string, earliest bool) error {
	n, err := c.client.partitions(ctx, topic, c.opts.Backoff)
	if err != nil {
		return err
	}
	var pcs []*partitionConsumer
	if n == 0 {
		pcs = append(pcs, newPartitionConsumer(c, topic, -1))
	}
	for i := range n {
		pcs = append(pcs, newPartitionConsumer(c, partitionName(topic, i), int32(i)))
	}
	closeAll := func() {
		for _, pc := range pcs {
			pc.close(context.Background())
		}
	}
	for _, pc := range pcs {
		pc.earliest, pc.noCreate = earliest, true
		if err := pc.start(ctx); err != nil {
			closeAll()
			return err
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		closeAll()
		return ErrConsumerClosed
	}
	c.parts = append(slices.Clip(c.parts), pcs...)
	if n > 0 {
		c.topicsMu.Lock()
		c.partitioned[topic] = n
		c.topicsMu.Unlock()
	}
	c.mu.Unlock()
	return nil
}

// removeTopic closes the consumers of topic's partitions and drops what they queued.
func (c *Consumer) removeTopic(topic string) {
	c.mu.Lock()
	c.topicsMu.Lock()
	delete(c.partitioned, topic)
	c.topicsMu.Unlock()
	var gone, kept []*partitionConsumer
	for _, pc := range c.parts {
		if pc.baseTopic() == topic {
			gone = append(gone, pc)
		} else {
			kept = append(kept, pc)
		}
	}
	c.parts = kept
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.cut, 10*time.Second)
	defer cancel()
	for _, pc := range gone {
		pc.close(ctx)
		c.removeFrom(pc)
	}
}
