package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestAQuietTopicsReservationGoesBack: a consumer that took everything from a topic
// that then goes quiet still has permits out at the broker, reserved from the shared
// MemoryLimiter at the bytes they may bring. Those bytes may never come: held for good,
// they kept the budget spent (248 KiB of 256 KiB for one 1 MiB window of 8 KiB
// messages), and every other user waited for room for ever — an ingress record of
// 64 KiB never got it. A reservation unused for reservationIdle goes back; what those
// permits bring later is charged as it arrives, and still delivered.
func TestAQuietTopicsReservationGoesBack(t *testing.T) {
	const limit = 256 << 10
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud, KeepMemoryCharge: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	payload := func(i int) string { return fmt.Sprintf("%08d", i) + string(make([]byte, 8<<10-8)) }
	for i := range 40 {
		b.DeliverPayloads(faultTopic, []byte(payload(i)))
	}
	for i := range 40 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		cons.Settled(m) // the application is done with it
	}
	if r := cons.Stats().ReservedBytes; r == 0 {
		t.Fatal("no permits reserved after the backlog was taken: the test shows nothing")
	}
	// The topic is quiet: another user of the budget gets its room.
	if err := bud.Acquire(ctx, 64<<10); err != nil {
		t.Fatalf("a 64 KiB acquisition next to a quiet consumer: %v (budget %+v, consumer %+v)", err, bud.Stats(), cons.Stats())
	}
	bud.Release(64 << 10)
	// The permits still out bring what comes next: it is charged on arrival and delivered.
	b.DeliverPayloads(faultTopic, []byte(payload(40)))
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()[:8]) != "00000040" {
		t.Fatalf("after the quiet spell: %v, %v", m, err)
	}
	if m.MemoryCharge() != int64(m.Size()) {
		t.Fatalf("the message after the quiet spell carries a charge of %d for %d bytes", m.MemoryCharge(), m.Size())
	}
	cons.Settled(m)
	cons.Settled(m) // once only: the budget would go below zero and panic
	cons.Close()
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close", used)
	}
}
