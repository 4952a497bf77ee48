package e2e

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// hostileBatchMetadata is a MessageMetadata (producer_name 1, sequence_id 2,
// publish_time 3, num_messages_in_batch 11) announcing n messages in the batch.
func hostileBatchMetadata(n int32) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "hostile")
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(time.Now().UnixMilli()))
	b = protowire.AppendTag(b, 11, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(n))) // int32 fields are sign-extended
}

// TestConsumerSurvivesAHostileProducer: a producer writes, through the real broker, a
// batch whose metadata says -1 messages (and another saying 2^31-1). Before delivery
// metadata was validated, the first panicked the consumer's connection reader and
// killed the process; now each is acknowledged with a validation error, counted, and
// the next message is delivered.
func TestConsumerSurvivesAHostileProducer(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "hostile")
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s", InitialPosition: pulsar.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	// A well-formed batch body of one message; only the count lies.
	smd := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 3) // payload_size 3
	body := append(binary.BigEndian.AppendUint32(nil, uint32(len(smd))), smd...)
	body = append(body, "bad"...)
	for _, n := range []int32{-1, 1<<31 - 1} {
		if err := pulsartest.Publish(ctx, b.URL, topic, hostileBatchMetadata(n), body); err != nil {
			t.Fatalf("publishing a batch of %d through the broker: %v", n, err)
		}
	}
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("good")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload()) != "good" {
		t.Fatalf("received %q, want the message after the hostile ones", m.Payload())
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	if s := cons.Stats(); s.Malformed != 2 {
		t.Fatalf("stats %+v: want 2 malformed", s)
	}
}
