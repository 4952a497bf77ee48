package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestReceiverQueueBytesOnTheBroker: on the real broker, a slow reader of 64 KiB
// messages with ReceiverQueueBytes 256 KiB holds at most that many bytes in the
// consumer's queue (not ReceiverQueueSize messages), and gets every message in order.
func TestReceiverQueueBytesOnTheBroker(t *testing.T) {
	const (
		bound = 256 << 10
		size  = 64 << 10
		n     = 60
	)
	b := broker.Get(t)
	topic := b.Topic(t, "recv-bytes")
	ours := newOurClient(t, b)
	cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}, ReceiverQueueSize: 1000, ReceiverQueueBytes: bound})
	prod, err := newOfficialClient(t, b).CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var want []string
	for i := range n {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		if _, err := prod.Send(ctx, &official.ProducerMessage{Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	maxHeld := 0
	for i, w := range want {
		// The slow reader: before each take, wait until the queue holds at least half
		// the bound (permits go back in groups of half of it), or the rest of the topic;
		// the first message comes alone (one permit goes until the size is known).
		fill := min(bound/2/size, len(want)-i)
		if i == 0 {
			fill = 1
		}
		for cons.Buffered() < fill && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		held := cons.Stats().HeldBytes
		maxHeld = max(maxHeld, held)
		if held > bound {
			t.Fatalf("before message %d the queue holds %d bytes (%d messages), bound %d", i, held, cons.Buffered(), bound)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, n, err)
		}
		if got := string(m.Payload()); got != w {
			t.Fatalf("message %d: got %.8q…, want %.8q…", i, got, w)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if maxHeld < bound/2 {
		t.Fatalf("the queue never held more than %d bytes: the bound %d was not exercised", maxHeld, bound)
	}
	t.Logf("max held %d bytes, bound %d", maxHeld, bound)
}
