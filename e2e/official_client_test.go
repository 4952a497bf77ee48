package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
)

// TestOfficialClientRoundTripOnPartitionedTopic proves the test broker is real: a partitioned
// topic created through the admin API carries keyed messages from the official client's
// producer to its consumer intact and in per-key order. It is the reference peer that
// the bridge's own client is compared against.
func TestOfficialClientRoundTripOnPartitionedTopic(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "official-roundtrip")
	const partitions, keys, perKey = 4, 16, 250
	b.CreatePartitionedTopic(t, topic, partitions)

	var meta struct{ Partitions int }
	if err := json.Unmarshal(b.MustAdmin(t, "GET", "/admin/v2/persistent/public/default/"+topicName(topic)+"/partitions", nil), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Partitions != partitions {
		t.Fatalf("admin API reports %d partitions, want %d", meta.Partitions, partitions)
	}

	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            "check",
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, keys*perKey)
	for i := range perKey {
		for k := range keys {
			producer.SendAsync(ctx, &pulsar.ProducerMessage{
				Key:        fmt.Sprintf("key-%02d", k),
				Payload:    []byte(fmt.Sprintf("key-%02d/%05d", k, i)),
				Properties: map[string]string{"seq": fmt.Sprint(i)},
			}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
		}
	}
	if err := producer.Flush(); err != nil {
		t.Fatal(err)
	}
	for range keys * perKey {
		if err := <-errs; err != nil {
			t.Fatalf("send failed: %v", err)
		}
	}

	next := map[string]int{}
	partitionsSeen := map[int32]bool{}
	for n := 0; n < keys*perKey; n++ {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d messages: %v", n, err)
		}
		want := fmt.Sprintf("%s/%05d", msg.Key(), next[msg.Key()])
		if string(msg.Payload()) != want {
			t.Fatalf("message %d on key %s: payload %q, want %q (per-key order broken or content changed)", n, msg.Key(), msg.Payload(), want)
		}
		if msg.Properties()["seq"] != fmt.Sprint(next[msg.Key()]) {
			t.Fatalf("message %q: property seq=%q, want %d", msg.Payload(), msg.Properties()["seq"], next[msg.Key()])
		}
		next[msg.Key()]++
		partitionsSeen[msg.ID().PartitionIdx()] = true
		if err := consumer.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
	if len(next) != keys {
		t.Fatalf("saw %d keys, want %d", len(next), keys)
	}
	if len(partitionsSeen) < 2 {
		t.Fatalf("all keys landed on partitions %v: the topic is not really partitioned", partitionsSeen)
	}
	t.Logf("%d messages over %d keys, %d of %d partitions used, per-key order kept", keys*perKey, keys, len(partitionsSeen), partitions)
}
