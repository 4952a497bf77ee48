package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
)

// TestBrokerKillAndRestartKeepsPersistedMessages proves the fault-test controls work on the
// real broker: messages the broker acknowledged survive a kill -9 and a restart on the same data.
func TestBrokerKillAndRestartKeepsPersistedMessages(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("broker not started by pulsar.sh; cannot kill it")
	}
	topic := b.Topic(t, "restart")
	const n = 200

	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 60 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range n {
		if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%04d", i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	producer.Close()

	start := time.Now()
	b.Restart(t)
	t.Logf("kill -9 and restart took %s", time.Since(start).Round(100*time.Millisecond))

	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "after-restart",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for i := range n {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d after restart: %v", i, err)
		}
		if want := fmt.Sprintf("m-%04d", i); string(msg.Payload()) != want {
			t.Fatalf("message %d after restart = %q, want %q", i, msg.Payload(), want)
		}
		consumer.Ack(msg)
	}
}
