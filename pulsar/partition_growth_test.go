package pulsar_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// Partitions added at runtime are adopted all together or not at all, as the Java
// client does: while one of the new partitions refuses its producer, keyed messages go
// on routing by the old count, never by a count the topic never had (which would put
// a key on a partition neither the Java client nor this one, before or after, puts it).
func TestAPartitionedProducerAdoptsNewPartitionsOnlyAllTogether(t *testing.T) {
	b := fakeBroker(t)
	const topic = "persistent://public/default/grown"
	b.SetPartitions(topic, 2)
	c := client(t, b.URL())
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, PartitionsRefreshInterval: 5 * time.Millisecond})

	var mu sync.Mutex
	refusing, refusals := true, 0
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		if cmd.Cmd.GetType() != pulsartest.CommandProducer || !strings.HasSuffix(cmd.Cmd.GetProducer().GetTopic(), "-partition-3") {
			return pulsartest.Pass()
		}
		mu.Lock()
		defer mu.Unlock()
		if !refusing {
			return pulsartest.Pass()
		}
		refusals++
		return pulsartest.Refuse(pulsartest.ErrAuthorization, "not yet")
	})
	b.SetPartitions(topic, 4)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Two refusals: the refresh that met the first one has ended.
	waitFor("two refusals of the fourth partition", func() bool { mu.Lock(); defer mu.Unlock(); return refusals >= 2 })
	if n := p.Partitions(); n != 2 {
		t.Fatalf("with the fourth partition refusing its producer, the producer routes by %d partitions; want the old 2 until all 4 are ready", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: k, Payload: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	refusing = false
	mu.Unlock()
	waitFor("the producer to adopt 4 partitions", func() bool { return p.Partitions() == 4 })
	for _, k := range keys {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: k, Payload: []byte(k + "4")}); err != nil {
			t.Fatal(err)
		}
	}
	for part := range 4 {
		for _, m := range b.Messages(fmt.Sprintf("%s-partition-%d", topic, part)) {
			n := 2
			if strings.HasSuffix(string(m.Payload), "4") {
				n = 4
			}
			if want := pulsar.JavaStringHash.Partition(m.Key, n); part != want {
				t.Errorf("key %q sent under %d partitions is on partition %d; the Java client puts it on %d", m.Key, n, part, want)
			}
		}
	}
}
