package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

func newOurClient(t testing.TB, b *broker.Broker) *pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newOfficialClient(t testing.TB, b *broker.Broker) official.Client {
	t.Helper()
	c, err := official.NewClient(official.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func officialSubscribe(t testing.TB, c official.Client, topic string) official.Consumer {
	t.Helper()
	cons, err := c.Subscribe(official.ConsumerOptions{
		Topic: topic, SubscriptionName: "check", Type: official.Exclusive,
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// TestOurProducerToOfficialConsumer publishes with the bridge's own client and reads with
// the official one: payload, key, properties, event time and per-key order must all
// survive, for plain, batched, every compression codec and a keyed partitioned topic.
func TestOurProducerToOfficialConsumer(t *testing.T) {
	b := broker.Get(t)
	cases := []struct {
		name       string
		opts       pulsar.ProducerOptions
		partitions int
	}{
		{"plain", pulsar.ProducerOptions{DisableBatching: true}, 0},
		{"batched", pulsar.ProducerOptions{}, 0},
		{"batched-lz4", pulsar.ProducerOptions{Compression: pulsar.LZ4}, 0},
		{"batched-zlib", pulsar.ProducerOptions{Compression: pulsar.ZLib}, 0},
		{"batched-zstd", pulsar.ProducerOptions{Compression: pulsar.ZStd}, 0},
		{"batched-snappy", pulsar.ProducerOptions{Compression: pulsar.Snappy}, 0},
		{"plain-zstd", pulsar.ProducerOptions{Compression: pulsar.ZStd, DisableBatching: true}, 0},
		{"keyed-partitioned", pulsar.ProducerOptions{}, 4},
		{"keyed-partitioned-murmur", pulsar.ProducerOptions{HashingScheme: pulsar.Murmur3_32Hash}, 3},
	}
	ours := newOurClient(t, b)
	theirs := newOfficialClient(t, b)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := b.Topic(t, "ours-"+tc.name)
			if tc.partitions > 0 {
				b.CreatePartitionedTopic(t, topic, tc.partitions)
			}
			cons := officialSubscribe(t, theirs, topic)
			opts := tc.opts
			opts.Topic = topic
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			prod, err := ours.CreateProducer(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			const keys, perKey = 8, 300
			event := time.UnixMilli(1_700_000_000_123)
			errs := make(chan error, keys*perKey)
			for i := range perKey {
				for k := range keys {
					m := &pulsar.ProducerMessage{
						Payload:    []byte(fmt.Sprintf("key-%d/%05d/%s", k, i, bytes.Repeat([]byte{'p'}, i%50))),
						Key:        fmt.Sprintf("key-%d", k),
						Properties: map[string]string{"i": fmt.Sprint(i), "case": tc.name},
						EventTime:  event,
					}
					prod.SendAsync(ctx, m, func(_ pulsar.MessageID, err error) { errs <- err })
				}
			}
			if err := prod.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for range keys * perKey {
				if err := <-errs; err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			next := map[string]int{}
			for n := range keys * perKey {
				msg, err := cons.Receive(ctx)
				if err != nil {
					t.Fatalf("receive %d: %v", n, err)
				}
				i := next[msg.Key()]
				want := fmt.Sprintf("%s/%05d/%s", msg.Key(), i, bytes.Repeat([]byte{'p'}, i%50))
				if string(msg.Payload()) != want {
					t.Fatalf("message %d: payload %q, want %q", n, msg.Payload(), want)
				}
				if msg.Properties()["i"] != fmt.Sprint(i) || msg.Properties()["case"] != tc.name || !msg.EventTime().Equal(event) {
					t.Fatalf("message %q: properties %v, event time %v", msg.Payload(), msg.Properties(), msg.EventTime())
				}
				next[msg.Key()]++
				cons.Ack(msg)
			}
		})
	}
}

// TestOurChunkedMessageToOfficialConsumer publishes a 20 MiB message (4x the broker's
// limit) in memory and another streamed from an io.Reader; the official consumer
// reassembles both byte for byte.
func TestOurChunkedMessageToOfficialConsumer(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "ours-chunked")
	theirs := newOfficialClient(t, b)
	cons, err := theirs.Subscribe(official.ConsumerOptions{
		Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: official.SubscriptionPositionEarliest,
		MaxPendingChunkedMessage: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ours := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, err := ours.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, Compression: pulsar.LZ4})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	big := make([]byte, 20<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>10)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: big, Key: "big", Properties: map[string]string{"kind": "memory"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.SendStream(ctx, &pulsar.ProducerMessage{Key: "big", Properties: map[string]string{"kind": "stream"}}, int64(len(big)), bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after"), Key: "big"}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"memory", "stream"} {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(msg.Payload(), big) || msg.Properties()["kind"] != kind || msg.Key() != "big" {
			t.Fatalf("%s: got %d bytes (equal=%v), properties %v", kind, len(msg.Payload()), bytes.Equal(msg.Payload(), big), msg.Properties())
		}
		cons.Ack(msg)
	}
	msg, err := cons.Receive(ctx)
	if err != nil || string(msg.Payload()) != "after" {
		t.Fatalf("message after the chunked ones: %v %q", err, msg.Payload())
	}
}
