package pulsarpool

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// framed is a batch of deliveries received from one frame, with their payloads as the
// deliveries gave them (aliasing the frame's buffer) and as they were sent.
type framed struct {
	ds   []*egress.Delivery
	raw  [][]byte
	want [][]byte
}

// payloadOf is message i of batch tag: 1 KiB, different from every other's.
func payloadOf(tag string, i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%s-%03d|", tag, i), 1024/(len(tag)+5))[:1000]
}

// receiveBatch delivers a batch of n 1 KiB messages (one frame of about n KiB, from a
// pooled buffer) and receives them.
func receiveBatch(t *testing.T, ctx context.Context, b *pulsartest.Broker, sub egress.Subscription, topic, tag string, n int) framed {
	t.Helper()
	var f framed
	msgs := make([]pulsartest.BatchMessage, n)
	for i := range msgs {
		msgs[i].Payload = payloadOf(tag, i)
		f.want = append(f.want, msgs[i].Payload)
	}
	b.DeliverBatch(topic, 0, 0, msgs...)
	for range n {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f.ds = append(f.ds, d)
		f.raw = append(f.raw, d.Payload)
	}
	for i, p := range f.raw {
		if !bytes.Equal(p, f.want[i]) {
			t.Fatalf("batch %s message %d arrived as %.20q..., want %.20q...", tag, i, p, f.want[i])
		}
	}
	return f
}

// intact fails the test if any payload of f no longer reads as it was sent.
func (f framed) intact(t *testing.T, what string) {
	t.Helper()
	for i, p := range f.raw {
		if !bytes.Equal(p, f.want[i]) {
			t.Fatalf("%s: message %d's payload reads %.20q..., want %.20q...: its frame was released while it was held", what, i, p, f.want[i])
		}
	}
}

// poisoned fails the test unless every payload of f reads the poison: its frame was
// given back for reuse.
func (f framed) poisoned(t *testing.T, what string) {
	t.Helper()
	for i, p := range f.raw {
		if len(p) == 0 || bytes.Count(p, []byte{pulsartest.PoisonedByte}) != len(p) {
			t.Fatalf("%s: message %d's payload reads %.20q..., want the poison: its frame was not given back", what, i, p)
		}
	}
}

// TestAFramesBufferIsReusedOnlyOnceEveryMessageIsCopiedAndSettled: the buffer a batch
// came in is given back for reuse (here filled with poison, so that a payload read after
// it was released shows it) once every message of it was both written by the stream
// (Copied) and settled; never while one is held, nor for a message settled before it
// was written, dead-lettered, or held when its subscription closed.
func TestAFramesBufferIsReusedOnlyOnceEveryMessageIsCopiedAndSettled(t *testing.T) {
	defer pulsartest.PoisonReleasedFrames(pulsartest.PoisonReleasedFrames(true))
	b := fakeBroker(t)
	c := newClient(t, b.URL())
	pool, _ := newPool(t, c, Options{})
	s := NewSubscriber(c, nil)
	s.DeadLetters(pool)
	const topic, dlq = "persistent://public/default/reuse", "persistent://public/default/reuse-DLQ"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "out", Type: "shared", ReceiverQueue: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pc := sub.(egress.PayloadCopier)
	const n = 8

	// Acknowledged: all but one written and acknowledged; the last, written, still held.
	a := receiveBatch(t, ctx, b, sub, topic, "ack", n)
	for _, d := range a.ds[:n-1] {
		pc.Copied(d)
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	pc.Copied(a.ds[n-1])
	a.intact(t, "one message written, not yet acknowledged")
	next := receiveBatch(t, ctx, b, sub, topic, "next", n) // a frame that would take a's buffer
	a.intact(t, "a further frame read while one message is held")
	if err := sub.Ack(a.ds[n-1]); err != nil {
		t.Fatal(err)
	}
	a.poisoned(t, "every message written and acknowledged")

	// Negatively acknowledged (for redelivery) or released (superseded), written or not.
	for _, d := range next.ds {
		sub.Nack(d, 0) // settled without having been written
	}
	next.intact(t, "settled without being written")
	nk := receiveBatch(t, ctx, b, sub, topic, "nack", n)
	for i, d := range nk.ds {
		pc.Copied(d)
		if i%2 == 0 {
			sub.Nack(d, 0)
		} else {
			sub.(egress.Releaser).Release(d)
		}
	}
	nk.poisoned(t, "every message written, then nacked or released")

	// Acknowledged with a receipt, all at once.
	cf := receiveBatch(t, ctx, b, sub, topic, "confirmed", n)
	for _, d := range cf.ds {
		pc.Copied(d)
	}
	for i, err := range sub.(egress.ConfirmedAcker).AckConfirmed(ctx, cf.ds) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	cf.poisoned(t, "every message written and its acknowledgement confirmed")

	// Acknowledged before the stream wrote it (a client acknowledging an id it guessed):
	// the write that follows reads it, so it is never released.
	early := receiveBatch(t, ctx, b, sub, topic, "early", n)
	if err := sub.Ack(early.ds[0]); err != nil {
		t.Fatal(err)
	}
	for _, d := range early.ds {
		pc.Copied(d)
	}
	for _, d := range early.ds[1:] {
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	early.intact(t, "one message acknowledged before it was written")

	// Dead-lettered after being written (a client's nack at maxDeliveries), with a wait
	// that ends before the publication: the producer may still hold the payload when the
	// delivery is settled, so the frame is never released through it.
	dl := receiveBatch(t, ctx, b, sub, topic, "dead", n)
	for _, d := range dl.ds {
		pc.Copied(d)
	}
	gone, stop := context.WithCancel(ctx)
	stop()
	_ = sub.(egress.DeadLetterer).DeadLetter(gone, dl.ds[0], dlq)
	if err := sub.(egress.DeadLetterer).DeadLetter(ctx, dl.ds[1], dlq); err != nil {
		t.Fatal(err)
	}
	for _, d := range dl.ds {
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	dl.intact(t, "two messages dead-lettered, then every message acknowledged")
	for _, m := range b.Messages(dlq) {
		if !bytes.Equal(m.Payload, dl.want[0]) && !bytes.Equal(m.Payload, dl.want[1]) {
			t.Fatalf("a dead letter reads %.20q..., want one of the two dead-lettered payloads", m.Payload)
		}
	}

	// Held when the subscription closes: settled by the close, not released.
	held := receiveBatch(t, ctx, b, sub, topic, "held", n)
	for _, d := range held.ds[:n/2] {
		pc.Copied(d)
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range held.ds[n/2:] {
		pc.Copied(d)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range held.ds[n/2:] {
		_ = sub.Ack(d) // after the close: settled already
	}
	held.intact(t, "half the messages held when the subscription closed")
}
