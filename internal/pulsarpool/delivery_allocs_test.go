package pulsarpool

import (
	"context"
	"testing"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/budget"
)

// TestADeliveryCostsTwoAllocations: handing a message to egress allocates its delivery
// and handle together, and its id's text: two allocations, where the delivery, the
// handle and their entry in a map of held handles made three and more per message.
// What is held is still listed, and settled once.
func TestADeliveryCostsTwoAllocations(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(1 << 20)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/allocs"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	es, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	b.DeliverPayloads(topic, []byte("one"))
	d, err := es.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := es.(*subscription)
	m := d.Handle.(*handle).m
	if n := testing.AllocsPerRun(1000, func() { sub.settle(sub.delivery(m)) }); n > 2 {
		t.Fatalf("a delivery makes %v allocations, want at most 2", n)
	}

	// The list: what is held is settled once, whatever the order.
	ds := []*egress.Delivery{sub.delivery(m), sub.delivery(m), sub.delivery(m)}
	for _, i := range []int{1, 0, 2, 1} {
		sub.settle(ds[i])
	}
	sub.mu.Lock()
	head, heldBytes := sub.held.head, sub.heldBytes
	sub.mu.Unlock()
	// Left: the first delivery, received above and never settled.
	if head != d.Handle.(*handle) || head.next != nil || heldBytes != int64(len("one")) {
		t.Fatalf("after settling the three deliveries: list head %p (want %p, alone), %d bytes held (want 3)", head, d.Handle, heldBytes)
	}
}
