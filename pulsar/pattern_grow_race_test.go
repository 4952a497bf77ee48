package pulsar_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A partition added to a pattern's topic is subscribed once, though both the watcher's
// update and the periodic partition refresh find it at the same time: a second
// consumer of the same partition would hold permits and memory of its own (and on an
// exclusive subscription be refused, with a warning, at every growth).
func TestPatternConsumerSubscribesAnAddedPartitionOnce(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	var mu sync.Mutex
	subs := map[string]int{}
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		if s := cmd.Cmd.GetSubscribe(); s != nil {
			mu.Lock()
			subs[s.GetTopic()]++
			mu.Unlock()
		}
		return pulsartest.Pass()
	})
	b.CreateTopic(patNS+"orders-p", 1)
	c := client(t, b.URL())
	pat, err := pulsar.ParseTopicsPattern(patNS + "orders-.*")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{TopicsPattern: pat, Subscription: "s", Type: pulsar.Shared,
		DiscoveryInterval: time.Hour, PartitionsRefreshInterval: time.Millisecond,
		Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	waitFor(t, "the watcher", func() bool { return cons.Stats().Discovery == pulsar.DiscoveryWatching })
	const n = 40
	for i := 2; i <= n; i++ {
		b.CreateTopic(patNS+"orders-p", i)
		last := patNS + "orders-p-partition-" + strconv.Itoa(i-1)
		waitFor(t, "partition "+strconv.Itoa(i-1), func() bool { mu.Lock(); defer mu.Unlock(); return subs[last] > 0 })
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		topic := patNS + "orders-p-partition-" + strconv.Itoa(i)
		if subs[topic] != 1 {
			t.Errorf("%s subscribed %d times; want once", topic, subs[topic])
		}
	}
}
