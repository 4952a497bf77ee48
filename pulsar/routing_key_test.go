package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// A keyless message with a RoutingKey lands on the partition its key would choose,
// from every producer that sends it (a resend after a restart deduplicates only on
// the partition of its first copy), and is stored without a key; keyless messages
// without one still spread over the partitions.
func TestARoutingKeyPinsKeylessMessagesToOnePartitionAcrossProducers(t *testing.T) {
	b := fakeBroker(t)
	const topic, n = "persistent://public/default/routed", 3
	b.SetPartitions(topic, n)
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const routing = "recordio-bridge/mesos/scheduler-1"
	for round := range 3 {
		p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		for i := range 10 {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("r%d-%d", round, i)), RoutingKey: routing}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 10 {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("free%d-%d", round, i))}); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()
	}
	// JavaStringHash of the routing key, as for a key (see hash_test.go's golden values).
	want := -1
	spread := map[int]int{}
	for part := range n {
		for _, m := range b.Messages(fmt.Sprintf("%s-partition-%d", topic, part)) {
			if m.Key != "" {
				t.Fatalf("a message routed by its RoutingKey was stored with key %q", m.Key)
			}
			if m.Payload[0] == 'r' {
				if want >= 0 && want != part {
					t.Fatalf("routed messages on partitions %d and %d", want, part)
				}
				want = part
			} else {
				spread[part]++
			}
		}
	}
	if want < 0 {
		t.Fatal("no routed message was stored")
	}
	if len(spread) < 2 {
		t.Fatalf("keyless messages without a routing key all went to one partition: %v", spread)
	}
}
