package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// Keyless messages without a routing key spread over a partitioned topic as the Java
// client's default router spreads them: each producer starts on a random partition (not
// every new producer, after an idle close or a restart, on partition 0), and a batching
// producer moves on to the next partition every batching delay, not only after a full
// batch's count of messages (which a low-rate topic would take minutes or hours to send,
// all of them to one partition).
func TestKeylessMessagesSpreadOverPartitionsAsTheJavaClientSpreadsThem(t *testing.T) {
	b := fakeBroker(t)
	const topic, n = "persistent://public/default/keyless", 4
	b.SetPartitions(topic, n)
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := map[int32]int{}
	for i := range 16 {
		p := producer(t, c, pulsar.ProducerOptions{Topic: topic})
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "first-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		first[id.Partition]++
		p.Close()
	}
	if len(first) < 2 {
		t.Errorf("the first keyless message of 16 new producers went to partitions %v: every producer starts on the same one", first)
	}
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, BatchingMaxDelay: time.Millisecond})
	later := map[int32]int{}
	for i := range 20 {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "slow-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		later[id.Partition]++
		time.Sleep(3 * time.Millisecond) // three batching delays
	}
	if len(later) < 2 {
		t.Errorf("20 keyless messages sent one every three batching delays all went to partitions %v", later)
	}
}
