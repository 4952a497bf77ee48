package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// On the real broker: a named stream's ExclusiveWithFencing producer, batching keyed
// and keyless records (routed by a routing key) over a partitioned topic, survives the
// topic's ownership moving (every partition unloaded while batches are in flight): it
// registers again with its topic epoch and is not fenced, every record is answered, and
// the topic holds each once, every key on the partition the Java client's
// JavaStringHash gives it.
func TestFencingProducerSurvivesTopicUnloadsWhileBatching(t *testing.T) {
	b := broker.Get(t)
	ns := dedupNamespace(t, b, "fence-unload", true)
	topic := "persistent://" + ns + "/" + broker.Name("t")
	const parts = 3
	b.CreatePartitionedTopic(t, topic, parts)
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, Name: "stream@3", Deduplication: true,
		// A window of one entry in flight: records 1 ms apart then batch behind it, as
		// this test means them to (with the default window they would mostly leave alone).
		AccessMode: pulsar.AccessExclusiveWithFencing, BatchingMaxDelay: 20 * time.Millisecond, BatchingMaxInFlight: 1, PartitionsRefreshInterval: -1,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 600
	const routing = "recordio-bridge/r/stream"
	key := func(i int) string {
		if i%3 == 0 {
			return ""
		}
		return fmt.Sprintf("task-%d", i%17)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[int]error{}
	for i := range n {
		if i > 0 && i%150 == 0 {
			for part := range parts {
				b.MustAdmin(t, http.MethodPut, adminTopicPath(fmt.Sprintf("%s-partition-%d", topic, part))+"/unload", nil)
			}
		}
		seq := int64(i)
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i), Key: key(i), RoutingKey: routing, SequenceID: &seq},
			func(_ pulsar.MessageID, err error) {
				if err != nil {
					mu.Lock()
					errs[i] = err
					mu.Unlock()
				}
				wg.Done()
			})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d records failed across the unloads, e.g. %v (the producer: %v)", len(errs), n, firstOf(errs), p.Err())
	}
	if err := p.Err(); err != nil {
		t.Fatalf("the producer stopped across the unloads: %v", err)
	}
	if r := p.Stats().Reconnects; r < parts {
		t.Fatalf("the producer reconnected %d times across %d unloads of %d partitions: the unloads did not move it", r, n/150-1, parts)
	}
	msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[string(m.Payload())]++
		var i int
		fmt.Sscanf(string(m.Payload()), "%d", &i)
		k := key(i)
		if k == "" {
			k = routing
		}
		part := m.ID().PartitionIdx()
		if want := pulsar.JavaStringHash.Partition(k, parts); int(part) != want {
			t.Errorf("record %d (key %q) is on partition %d, the Java client's is %d", i, key(i), part, want)
		}
	}
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("record %d stored %d times", i, c)
		}
	}
}

func firstOf(m map[int]error) error {
	for _, e := range m {
		return e
	}
	return nil
}
