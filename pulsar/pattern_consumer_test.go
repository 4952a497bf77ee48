package pulsar_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

const patNS = "persistent://tenant/ns/"

func patternConsumer(t *testing.T, c *pulsar.Client, pattern string, interval time.Duration) *pulsar.Consumer {
	t.Helper()
	pat, err := pulsar.ParseTopicsPattern(pattern)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{TopicsPattern: pat, Subscription: "s",
		DiscoveryInterval: interval, Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close() })
	return cons
}

// receiveFrom takes messages until it has one from every topic in want, failing on one
// from any other topic.
func receiveFrom(t *testing.T, cons *pulsar.Consumer, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	for len(missing) > 0 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receiving (still missing %v): %v", missing, err)
		}
		if !slices.Contains(want, m.Topic) {
			t.Fatalf("received a message of %s, which is not one of %v", m.Topic, want)
		}
		delete(missing, m.Topic)
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// subscriptions records the SUBSCRIBE commands the broker receives.
type subscriptions struct {
	mu   sync.Mutex
	subs map[string]*pb.CommandSubscribe
}

func recordSubscribes(b *pulsartest.Broker) *subscriptions {
	s := &subscriptions{subs: map[string]*pb.CommandSubscribe{}}
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		if sub := cmd.Cmd.GetSubscribe(); sub != nil {
			s.mu.Lock()
			s.subs[sub.GetTopic()] = sub
			s.mu.Unlock()
		}
		return pulsartest.Pass()
	})
	return s
}

func (s *subscriptions) get(topic string) *pb.CommandSubscribe {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[topic]
}

// A pattern consumer follows the namespace as the broker's watcher reports it: a topic
// created later is consumed from its earliest message, partitions added to a matched
// topic are consumed, a deleted topic's consumer closes without ending the others, a
// topic of another name is never consumed.
func TestPatternConsumerFollowsTopicsTheWatcherReports(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	subs := recordSubscribes(b)
	b.CreateTopic(patNS+"orders-a", 0)
	b.CreateTopic(patNS+"orders-p", 2)
	b.CreateTopic(patNS+"other", 0)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", time.Hour)
	waitFor(t, "the watcher", func() bool { return cons.Stats().Discovery == pulsar.DiscoveryWatching })
	if s := cons.Stats(); s.Topics != 2 || s.Discovery != pulsar.DiscoveryWatching {
		t.Fatalf("stats after start: %d topics, discovery %q; want 2 and %q", s.Topics, s.Discovery, pulsar.DiscoveryWatching)
	}
	if sub := subs.get(patNS + "orders-a"); sub.GetInitialPosition() != pb.CommandSubscribe_Latest || sub.GetForceTopicCreation() {
		t.Fatalf("a topic matched at start subscribes at %s (force creation %v); want the configured Latest, not creating it",
			sub.GetInitialPosition(), sub.GetForceTopicCreation())
	}
	b.DeliverPayloads(patNS+"orders-a", []byte("a"))
	b.DeliverPayloads(patNS+"orders-p-partition-1", []byte("p1"))
	b.DeliverPayloads(patNS+"other", []byte("x"))
	receiveFrom(t, cons, patNS+"orders-a", patNS+"orders-p-partition-1")

	b.CreateTopic(patNS+"orders-new", 0)
	waitFor(t, "the new topic's subscription", func() bool { return subs.get(patNS+"orders-new") != nil })
	if sub := subs.get(patNS + "orders-new"); sub.GetInitialPosition() != pb.CommandSubscribe_Earliest {
		t.Fatalf("a topic discovered later subscribes at %s; want Earliest", sub.GetInitialPosition())
	}
	b.CreateTopic(patNS+"orders-p", 3)
	waitFor(t, "the added partition's subscription", func() bool { return subs.get(patNS+"orders-p-partition-2") != nil })
	b.DeliverPayloads(patNS+"orders-new", []byte("n"))
	b.DeliverPayloads(patNS+"orders-p-partition-2", []byte("p2"))
	receiveFrom(t, cons, patNS+"orders-new", patNS+"orders-p-partition-2")

	b.DeleteTopic(patNS + "orders-a")
	waitFor(t, "the deleted topic's removal", func() bool { return cons.Stats().TopicsRemoved == 1 })
	b.DeliverPayloads(patNS+"orders-p-partition-0", []byte("p0"))
	receiveFrom(t, cons, patNS+"orders-p-partition-0")
	if s := cons.Stats(); s.Topics != 2 || s.TopicsAdded != 1 {
		t.Fatalf("stats: %d topics, %d added; want 2 and 1 (the one created after the start)", s.Topics, s.TopicsAdded)
	}
}

// Without the broker's watcher (enableBrokerSideSubscriptionPatternEvaluation=false),
// the namespace is listed every DiscoveryInterval.
func TestPatternConsumerPollsWithoutWatchers(t *testing.T) {
	b := fakeBroker(t)
	b.CreateTopic(patNS+"orders-a", 0)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", 50*time.Millisecond)
	b.CreateTopic(patNS+"orders-b", 0)
	waitFor(t, "the polled topic", func() bool { return cons.Stats().Topics == 2 })
	if s := cons.Stats(); s.Discovery != pulsar.DiscoveryPolling {
		t.Fatalf("discovery %q; want %q", s.Discovery, pulsar.DiscoveryPolling)
	}
	if n := b.Frames(pulsartest.CommandWatchTopicList); n != 0 {
		t.Fatalf("%d WATCH_TOPIC_LIST sent to a broker that offers no watchers", n)
	}
	b.DeliverPayloads(patNS+"orders-b", []byte("b"))
	receiveFrom(t, cons, patNS+"orders-b")
}

// A healthy watcher that misses a change (as Pulsar 4.0's does while its metadata
// session is down) does not hide it for ever: the namespace is listed every
// DiscoveryInterval even while the watcher is registered.
func TestPatternConsumerReconcilesWhileTheWatcherMissesChanges(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	b.CreateTopic(patNS+"orders-a", 0)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", 100*time.Millisecond)
	waitFor(t, "the watcher", func() bool { return cons.Stats().Discovery == pulsar.DiscoveryWatching })
	b.SetWatchersDeaf(true)
	b.CreateTopic(patNS+"orders-b", 0)
	waitFor(t, "the missed topic", func() bool { return cons.Stats().Topics == 2 })
	if s := cons.Stats(); s.Discovery != pulsar.DiscoveryWatching {
		t.Fatalf("discovery %q; want %q", s.Discovery, pulsar.DiscoveryWatching)
	}
}

// After the watcher's connection is lost, it registers again and the namespace is
// listed again: what changed meanwhile is applied without waiting for the interval.
func TestPatternConsumerListsAgainAfterTheWatcherReconnects(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	b.CreateTopic(patNS+"orders-a", 0)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", time.Hour)
	waitFor(t, "the watcher", func() bool { return cons.Stats().Discovery == pulsar.DiscoveryWatching })
	b.SetWatchersDeaf(true)
	b.CreateTopic(patNS+"orders-b", 0)
	b.DeleteTopic(patNS + "orders-a")
	b.SetWatchersDeaf(false)
	lists := b.Frames(pulsartest.CommandGetTopicsOfNamespace)
	b.DropConnections()
	waitFor(t, "the changes applied after the reconnection", func() bool {
		s := cons.Stats()
		return s.Topics == 1 && s.TopicsAdded == 1 && s.TopicsRemoved == 1
	})
	waitFor(t, "the namespace listed again after the reconnection", func() bool {
		return b.Frames(pulsartest.CommandGetTopicsOfNamespace) > lists
	})
	waitFor(t, "the watcher registered again", func() bool {
		return cons.Stats().Discovery == pulsar.DiscoveryWatching && b.Watchers() == 1
	})
	b.DeliverPayloads(patNS+"orders-b", []byte("b"))
	receiveFrom(t, cons, patNS+"orders-b")
}

// A topic deleted while its consumer was away (the broker closed it and the
// resubscription finds no topic) closes that consumer only; the pattern's consumer
// goes on, and the deleted topic is not created again by the resubscription.
func TestPatternConsumerSurvivesATopicDeletedUnderIt(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	b.CreateTopic(patNS+"orders-a", 0)
	b.CreateTopic(patNS+"orders-b", 0)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", time.Hour)
	waitFor(t, "the watcher", func() bool { return cons.Stats().Discovery == pulsar.DiscoveryWatching })
	b.SetWatchersDeaf(true) // only the consumer's own resubscription can tell
	b.DeleteTopic(patNS + "orders-a")
	waitFor(t, "the deleted topic's removal", func() bool { return cons.Stats().TopicsRemoved == 1 })
	b.DeliverPayloads(patNS+"orders-b", []byte("b"))
	receiveFrom(t, cons, patNS+"orders-b")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := cons.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after a topic was deleted, Receive = %v; want the consumer going on", err)
	}
}

// A role without the namespace-level grant cannot list the topics: Subscribe says so,
// naming the namespace and the grant.
func TestPatternConsumerNamesTheMissingNamespaceGrant(t *testing.T) {
	b := fakeBroker(t)
	b.RefuseNext(pulsartest.CommandGetTopicsOfNamespace, pulsartest.ErrAuthorization)
	c := client(t, b.URL())
	pat, _ := pulsar.ParseTopicsPattern(patNS + "orders-.*")
	_, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{TopicsPattern: pat, Subscription: "s"})
	if !errors.Is(err, pulsar.ErrTopicListRefused) {
		t.Fatalf("Subscribe = %v; want ErrTopicListRefused", err)
	}
	for _, want := range []string{"tenant/ns", "namespace-level grant", "AuthorizationError"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}
