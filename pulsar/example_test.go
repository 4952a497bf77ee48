package pulsar_test

import (
	"context"
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A producer publishes to a topic and learns each message's id once the broker has
// persisted it. The examples run against pulsartest's in-process broker; a real one is
// the same code with its URL (pulsar://host:6650 or pulsar+ssl://host:6651).
func ExampleClient_CreateProducer() {
	broker, err := pulsartest.NewBroker()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()

	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: broker.URL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	producer, err := client.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "persistent://public/default/events"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer producer.Close()

	// Send waits for the receipt; SendAsync calls back with it instead.
	if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Key: "task-1", Payload: []byte(`{"type":"UPDATE"}`)}); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range broker.Messages("persistent://public/default/events") {
		fmt.Printf("stored: key %s, payload %s\n", m.Key, m.Payload)
	}
	// Output:
	// stored: key task-1, payload {"type":"UPDATE"}
}

// A consumer receives what the broker dispatches as flow permits allow, and
// acknowledges each message once it is processed.
func ExampleClient_Subscribe() {
	broker, err := pulsartest.NewBroker()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()

	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: broker.URL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const topic = "persistent://public/default/tasks"
	consumer, err := client.Subscribe(ctx, pulsar.ConsumerOptions{
		Topics:       []string{topic},
		Subscription: "example",
		Type:         pulsar.Shared,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer consumer.Close()

	broker.DeliverPayloads(topic, []byte("first"), []byte("second"))
	for range 2 {
		m, err := consumer.Receive(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("received %s\n", m.Payload())
		if err := consumer.AckSync(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("acks:", len(broker.Acks(topic)))
	// Output:
	// received first
	// received second
	// acks: 2
}
