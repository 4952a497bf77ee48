package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// On the real broker: keyless messages of batching producers spread over a partitioned
// topic as the Java client's default router spreads them: new producers (the pool makes
// one after every idle close) start on random partitions, and a slow producer moves on
// every batching delay, instead of all of them starting on partition 0 and staying
// there for a thousand messages.
func TestKeylessMessagesOfBatchingProducersSpreadOverPartitions(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "keyless")
	b.CreatePartitionedTopic(t, topic, 3)
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := map[int32]int{}
	for i := range 12 {
		p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "first-%d", i)})
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		first[id.Partition]++
	}
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, BatchingMaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slow := map[int32]int{}
	for i := range 12 {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "slow-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		slow[id.Partition]++
		time.Sleep(3 * time.Millisecond)
	}
	if len(first) < 2 || len(slow) < 2 {
		t.Fatalf("keyless messages per partition: the first of 12 new producers %v, 12 of a slow producer %v; want them spread", first, slow)
	}
	t.Logf("per partition: first messages of new producers %v, a slow producer's %v", first, slow)
}
