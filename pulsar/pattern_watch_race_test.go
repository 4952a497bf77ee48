package pulsar_test

import (
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A watcher whose connection closes right after the broker accepted it (the answer and
// the close back to back) is registered again: the discovery does not go on "watching"
// a watcher that is gone, and a topic created afterwards is found without waiting for
// the next DiscoveryInterval.
func TestPatternConsumerRegistersAgainAWatcherLostAsItRegistered(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	b.CreateTopic(patNS+"orders-a", 0)
	b.CloseAfterAnswering(pulsartest.CommandWatchTopicList, 1)
	c := client(t, b.URL())
	cons := patternConsumer(t, c, patNS+"orders-.*", time.Hour)
	waitFor(t, "a watcher registered after the first one's connection closed", func() bool {
		return b.Watchers() == 1 && b.Frames(pulsartest.CommandWatchTopicList) >= 2
	})
	b.CreateTopic(patNS+"orders-b", 0)
	waitFor(t, "the topic created after the watcher was lost", func() bool { return cons.Stats().Topics == 2 })
	if s := cons.Stats(); s.Discovery != pulsar.DiscoveryWatching {
		t.Fatalf("discovery %q; want %q", s.Discovery, pulsar.DiscoveryWatching)
	}
}
