package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

func ourSubscribe(t testing.TB, c *pulsar.Client, opts pulsar.ConsumerOptions) *pulsar.Consumer {
	t.Helper()
	if opts.Subscription == "" {
		opts.Subscription = "ours"
	}
	if opts.InitialPosition == pulsar.Latest {
		opts.InitialPosition = pulsar.Earliest
	}
	cons, err := c.Subscribe(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close() })
	return cons
}

// TestOfficialProducerToOurConsumer publishes with the official client and reads with
// ours: payload, key, properties, event time and per-key order, for plain, batched
// (every codec), keyed partitioned and chunked (20 MiB) messages.
func TestOfficialProducerToOurConsumer(t *testing.T) {
	b := broker.Get(t)
	theirs := newOfficialClient(t, b)
	ours := newOurClient(t, b)
	cases := []struct {
		name       string
		opts       official.ProducerOptions
		partitions int
	}{
		{"plain", official.ProducerOptions{DisableBatching: true}, 0},
		{"batched", official.ProducerOptions{}, 0},
		{"batched-lz4", official.ProducerOptions{CompressionType: official.LZ4}, 0},
		{"batched-zlib", official.ProducerOptions{CompressionType: official.ZLib}, 0},
		{"batched-zstd", official.ProducerOptions{CompressionType: official.ZSTD}, 0},
		{"keyed-partitioned", official.ProducerOptions{}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := b.Topic(t, "theirs-"+tc.name)
			if tc.partitions > 0 {
				b.CreatePartitionedTopic(t, topic, tc.partitions)
			}
			cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}, ReceiverQueueSize: 100})
			opts := tc.opts
			opts.Topic = topic
			prod, err := theirs.CreateProducer(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const keys, perKey = 8, 250
			event := time.UnixMilli(1_700_000_000_456)
			for i := range perKey {
				for k := range keys {
					prod.SendAsync(ctx, &official.ProducerMessage{
						Payload: []byte(fmt.Sprintf("key-%d/%05d", k, i)), Key: fmt.Sprintf("key-%d", k),
						Properties: map[string]string{"i": fmt.Sprint(i)}, EventTime: event,
					}, func(_ official.MessageID, _ *official.ProducerMessage, err error) {
						if err != nil {
							t.Error(err)
						}
					})
				}
			}
			if err := prod.Flush(); err != nil {
				t.Fatal(err)
			}
			next := map[string]int{}
			for n := range keys * perKey {
				msg, err := cons.Receive(ctx)
				if err != nil {
					t.Fatalf("receive %d: %v", n, err)
				}
				i := next[msg.Key]
				if want := fmt.Sprintf("%s/%05d", msg.Key, i); string(msg.Payload()) != want {
					t.Fatalf("message %d: %q, want %q", n, msg.Payload(), want)
				}
				if msg.Properties["i"] != fmt.Sprint(i) || !msg.EventTime.Equal(event) {
					t.Fatalf("message %q: properties %v, event time %v", msg.Payload(), msg.Properties, msg.EventTime)
				}
				next[msg.Key]++
				if err := cons.Ack(msg); err != nil {
					t.Fatal(err)
				}
			}
			if s := cons.Stats(); s.Discarded != 0 || s.PermitsGranted < keys*perKey {
				t.Fatalf("stats %+v: nothing may be discarded, and permits must have been granted for every message", s)
			}
		})
	}
}

func TestOfficialChunkedMessageToOurConsumer(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "theirs-chunked")
	ours := newOurClient(t, b)
	cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}})
	prod, err := newOfficialClient(t, b).CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true, ChunkMaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	big := make([]byte, 20<<20)
	for i := range big {
		big[i] = byte(i*13 + i>>12)
	}
	for _, m := range [][]byte{big, []byte("small"), big} {
		if _, err := prod.Send(ctx, &official.ProducerMessage{Payload: m, Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range [][]byte{big, []byte("small"), big} {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var streamed bytes.Buffer
		if _, err := streamed.ReadFrom(msg.Body()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(streamed.Bytes(), want) || !bytes.Equal(msg.Payload(), want) || msg.Size() != len(want) {
			t.Fatalf("message %d: %d bytes, want %d", i, msg.Size(), len(want))
		}
		if err := cons.AckSync(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchIndexAcknowledgementPIP54 acknowledges the even indexes of a batch of 100,
// resubscribes, and gets exactly the 50 odd ones back; the subscription then flows
// through 10 000 more messages without running out of permits.
func TestBatchIndexAcknowledgementPIP54(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "pip54")
	theirs := newOfficialClient(t, b)
	prod, err := theirs.CreateProducer(official.ProducerOptions{Topic: topic, BatchingMaxMessages: 100, BatchingMaxPublishDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ours := newOurClient(t, b)
	opts := pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "pip54", BatchIndexAck: true, ReceiverQueueSize: 200}
	cons := ourSubscribe(t, ours, opts)
	for i := range 100 {
		prod.SendAsync(ctx, &official.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, nil)
	}
	if err := prod.Flush(); err != nil {
		t.Fatal(err)
	}
	var last *pulsar.Message
	for i := range 100 {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg.ID.BatchSize != 100 {
			t.Fatalf("message %d came in a batch of %d, want one batch of 100", i, msg.ID.BatchSize)
		}
		if i%2 == 0 {
			last = msg
			if err := cons.AckSync(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = last
	cons.Close()

	again := ourSubscribe(t, ours, opts)
	got := map[string]bool{}
	for range 50 {
		msg, err := again.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var i int
		fmt.Sscan(string(msg.Payload()), &i)
		if i%2 == 0 {
			t.Fatalf("acknowledged index %d delivered again", i)
		}
		got[string(msg.Payload())] = true
		if err := again.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 50 {
		t.Fatalf("%d distinct odd messages came back, want 50", len(got))
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	if msg, err := again.Receive(short); err == nil {
		t.Fatalf("unexpected extra message %q", msg.Payload())
	}
	cancelShort()

	// No permit starvation: 10 000 more flow through a 200-message window.
	for i := range 10_000 {
		prod.SendAsync(ctx, &official.ProducerMessage{Payload: []byte(fmt.Sprintf("more-%05d", i))}, nil)
	}
	if err := prod.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		msg, err := again.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of 10 000: %v (permits granted %d)", i, err, again.Stats().PermitsGranted)
		}
		if want := fmt.Sprintf("more-%05d", i); string(msg.Payload()) != want {
			t.Fatalf("got %q, want %q", msg.Payload(), want)
		}
		again.Ack(msg)
	}
}

// TestConsumerSurvivesBrokerKill9 consumes while the broker is killed with SIGKILL and
// restarted: every message arrives at least once, and none whose synchronous ack
// completed arrives again. The messages are not batched: the broker persists the
// acknowledgement of a batch index only with its cursor's mark-delete position, so a
// partly acknowledged batch can come back after a broker crash (a Pulsar property; the
// Pulsar client docs, docs/pulsar-client.md, say so).
func TestConsumerSurvivesBrokerKill9(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("broker not started by pulsar.sh; cannot kill it")
	}
	topic := b.Topic(t, "consume-kill9")
	ours := newOurClient(t, b)
	cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}, ReceiverQueueSize: 50, BatchIndexAck: true,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}})
	prod, err := newOfficialClient(t, b).CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const total = 3000
	for i := range total {
		prod.SendAsync(ctx, &official.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, nil)
	}
	if err := prod.Flush(); err != nil {
		t.Fatal(err)
	}
	prod.Close()

	acked := map[string]bool{}
	seen := map[string]int{}
	killed := false
	for len(seen) < total {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d distinct messages: %v", len(seen), err)
		}
		p := string(msg.Payload())
		if acked[p] {
			t.Fatalf("%s was delivered again after its synchronous ack completed", p)
		}
		seen[p]++
		if !killed && len(seen) == total/3 {
			killed = true
			b.Restart(t)
		}
		if err := cons.AckSync(ctx, msg); err == nil {
			acked[p] = true
		} else if !pulsar.IsRetryable(err) && !errors.Is(err, pulsar.ErrConnectionClosed) {
			t.Fatalf("ack of %s: %v", p, err)
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d messages, %d delivered more than once (in flight at the kill), reconnects %d", total, dups, cons.Stats().Reconnects)
	if cons.Stats().Reconnects == 0 {
		t.Fatal("the consumer never resubscribed: the kill did not hit it")
	}
}

func TestConsumerEndOfTopic(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "terminated")
	ours := newOurClient(t, b)
	prod, err := ours.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := prod.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}})
	b.MustAdmin(t, "POST", "/admin/v2/persistent/public/default/"+topicName(topic)+"/terminate", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		msg, err := cons.Receive(ctx)
		if err != nil || string(msg.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d: %v", i, err)
		}
		cons.Ack(msg)
	}
	if _, err := cons.Receive(ctx); !errors.Is(err, pulsar.ErrEndOfTopic) {
		t.Fatalf("after the last message of a terminated topic: %v, want ErrEndOfTopic", err)
	}
}
