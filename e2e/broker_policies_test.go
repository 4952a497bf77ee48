package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

func adminTopicPath(topic string) string {
	return "/admin/v2/" + strings.Replace(topic, "://", "/", 1)
}

// TestTopicMaxMessageSizeFailsOnlyTheMessage: a topic-level maxMessageSize below the
// broker's makes the broker refuse larger messages with NotAllowedError. Only that
// message fails (as ErrMessageTooLarge); the producer publishes the next one.
func TestTopicMaxMessageSizeFailsOnlyTheMessage(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "maxsize")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/maxMessageSize", []byte("1024"))
	// The policy reaches the broker asynchronously: send until it refuses.
	big := bytes.Repeat([]byte("x"), 4096)
	for {
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: big})
		if err != nil {
			var se *pulsar.ServerError
			if !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(22) /* NotAllowedError */ || !errors.Is(err, pulsar.ErrMessageTooLarge) {
				t.Fatalf("a 4 KiB message under a 1 KiB topic limit: %v; want ErrMessageTooLarge wrapping NotAllowedError", err)
			}
			if errors.Is(err, pulsar.ErrProducerFailed) {
				t.Fatalf("the refusal failed the producer: %v", err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the topic's maxMessageSize never took effect")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range 3 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "small-%d", i)}); err != nil {
			t.Fatalf("a small message after the refusal: %v", err)
		}
	}
}

// TestBacklogQuotaRefusalIsTemporary: with a producer_exception backlog quota exceeded,
// the broker refuses the producer after a topic unload. Sends fail with a temporary
// error meanwhile (ingress answers 503), the producer keeps reconnecting, and once the
// backlog is cleared it publishes again, without being recreated.
func TestBacklogQuotaRefusalIsTemporary(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "quota")
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/backlogQuota?backlogQuotaType=destination_storage",
		[]byte(`{"limitSize":1024,"limitTime":-1,"policy":"producer_exception"}`))
	topic := "persistent://" + ns + "/" + broker.Name("quota")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	payload := bytes.Repeat([]byte("b"), 2048)
	// Fill the backlog (nobody acknowledges), then unload the topic until the broker
	// refuses the producer's registration.
	var refused error
	for refused == nil {
		if ctx.Err() != nil {
			t.Fatal("the broker never refused the producer for its backlog quota")
		}
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload})
		var se *pulsar.ServerError
		switch {
		case err == nil:
			b.MustAdmin(t, http.MethodPut, adminTopicPath(topic)+"/unload", nil)
		case errors.As(err, &se) && se.Code == pulsar.ServerErrorCode(8): // ProducerBlockedQuotaExceededException
			if !pulsar.IsRetryable(err) || errors.Is(err, pulsar.ErrProducerFailed) {
				t.Fatalf("the quota refusal is not temporary: %v", err)
			}
			refused = err
		case pulsar.IsRetryable(err):
		default:
			t.Fatalf("send: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("refused: %v", refused)
	// Clear the backlog: the producer, still reconnecting, is accepted again.
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/subscription/slow/skip_all", nil)
	for {
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after the backlog cleared")})
		if err == nil {
			break
		}
		if !pulsar.IsRetryable(err) || ctx.Err() != nil {
			t.Fatalf("the producer did not recover once the backlog cleared: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPartitionsAddedAtRuntimeAreUsed: partitions added to a topic through the admin
// API while a producer and a consumer run are picked up at the next refresh: the
// producer writes to them and the consumer receives from them.
func TestPartitionsAddedAtRuntimeAreUsed(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "grow")
	b.CreatePartitionedTopic(t, topic, 2)
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const refresh = 200 * time.Millisecond
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "grow", PartitionsRefreshInterval: refresh})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, PartitionsRefreshInterval: refresh})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/partitions", []byte("4"))
	for p.Partitions() != 4 {
		if ctx.Err() != nil {
			t.Fatalf("the producer still writes to %d partitions", p.Partitions())
		}
		time.Sleep(refresh / 2)
	}
	// One message per partition, routed there round-robin.
	const n = 40
	perPartition := map[int32]int{}
	for i := range n {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		perPartition[id.Partition]++
	}
	if perPartition[2] == 0 || perPartition[3] == 0 {
		t.Fatalf("messages per partition: %v; nothing went to the new partitions", perPartition)
	}
	got := map[string]bool{}
	for len(got) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d (per partition sent: %v): %v", len(got), n, perPartition, err)
		}
		got[string(m.Payload())] = true
		_ = cons.Ack(m)
	}
}

// TestChunkedMessageOfMoreChunksThanTheWindow: a 6 MiB message in 1 MiB chunks reaches a
// consumer whose receiver window is 2: each non-final chunk's permit goes back on arrival.
func TestChunkedMessageOfMoreChunksThanTheWindow(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "window")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "w", ReceiverQueueSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := bytes.Repeat([]byte("0123456789abcdef"), 6<<20/16)
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: want}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("the chunked message never completed: %v", err)
	}
	if !bytes.Equal(m.Payload(), want) {
		t.Fatalf("received %d bytes, want the %d sent", len(m.Payload()), len(want))
	}
	if m, err = cons.Receive(ctx); err != nil || string(m.Payload()) != "after" {
		t.Fatalf("next: %v %v", m, err)
	}
}

// TestSendAsyncChunkedRecordsKeepTheirBytesAndOrder is the SendAsync chunking check on the real
// broker: records above the broker's maxMessageSize (chunked) and small ones are given to
// SendAsync from one buffer that the caller overwrites as soon as SendAsync returns, as
// ingress does with its read buffer. Every record arrives with its own bytes, in order.
func TestSendAsyncChunkedRecordsKeepTheirBytesAndOrder(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "nokeep")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 8
	large := 5<<20 + 512<<10 // above the broker's 5 MiB limit: chunked
	buf := make([]byte, large+n)
	var want [][]byte
	errs := make(chan error, n)
	for i := range n {
		size := 100 + i
		if i%2 == 0 {
			size = large + i
		}
		rec := buf[:size]
		for j := range rec {
			rec[j] = byte('a' + i)
		}
		want = append(want, bytes.Clone(rec))
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: rec}, func(_ pulsar.MessageID, err error) { errs <- err })
		for j := range buf {
			buf[j] = 'X'
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got := m.Payload(); !bytes.Equal(got, want[i]) {
			t.Fatalf("record %d: %d bytes starting %q, want %d bytes of %q (another record's bytes, or out of order)",
				i, len(got), got[:min(8, len(got))], len(want[i]), want[i][:1])
		}
		_ = cons.Ack(m)
	}
}
