package pulsarpool

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/budget"
)

// TestAStreamHoldingADeliveryGetsItsNextMessageAfterALargeOne: one message larger than
// the budget came through (as it may: it is admitted beyond the limit). Then a client
// that acknowledges two records at a time holds the first small one and waits for the
// second: the budget is all but empty, yet the consumer grants nothing, because while a
// delivery is unsettled an idle partition gets a permit only if the budget can reserve
// one at the partition's estimate, still that of the large message (it falls only
// with arrivals). The stream waits until ackTimeout nacks what it holds, then gets one
// record, and again: the client never gets its two.
func TestAStreamHoldingADeliveryGetsItsNextMessageAfterALargeOne(t *testing.T) {
	const limit = 64 << 10
	b := fakeBroker(t)
	bud := budget.New(limit)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-large-then-small"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 1000, ReceiverQueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	b.DeliverPayloads(topic, make([]byte, 100<<10))
	big, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(big); err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("small-1"), []byte("small-2"))
	first, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	second, err := sub.Receive(short)
	if err != nil {
		t.Fatalf("holding one 7-byte delivery under a %d-byte budget using %d, the next never came: %v", limit, bud.Stats().Used, err)
	}
	_ = sub.Ack(first)
	_ = sub.Ack(second)
}
