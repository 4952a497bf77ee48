package pulsartest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A fault test: the broker drops every connection between two sends, and the
// producer reconnects and registers again before the second is persisted.
func ExampleBroker_DropConnections() {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "persistent://public/default/faults"
	producer, err := client.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer producer.Close()

	for i, payload := range []string{"before", "after"} {
		if i == 1 {
			broker.DropConnections()
		}
		if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, m := range broker.Messages(topic) {
		fmt.Printf("%s (sequence %d)\n", m.Payload, m.SequenceID)
	}
	fmt.Println("connections made:", len(broker.ConnectCredentials()))
	// Output:
	// before (sequence 0)
	// after (sequence 1)
	// connections made: 2
}
