package pulsar_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestInterleavedChunkedMessagesAreNotDroppedWhileAnAcquireWaits: a partition
// reassembling two interleaved chunked messages holds their chunks' charge, which only
// its next permits can turn into messages (and release). An Acquire (an ingress record)
// that does not fit yet queues on the budget; with the budget serving waiters first come
// first served, TryReserve now fails for the partition although the budget has room for
// every remaining chunk, so the reassembly waits for the waiter, the waiter for the
// reassembly's bytes, and ChunkExpiry drops (and acknowledges) a message: a loss.
func TestInterleavedChunkedMessagesAreNotDroppedWhileAnAcquireWaits(t *testing.T) {
	const part, limit = 64 << 10, 1 << 20
	data := strings.Repeat("c", part)
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1, MemoryLimiter: bud,
		ChunkExpiry: time.Second})
	b.Deliver(faultTopic, chunk("a", 0, 4, data, 4*part), chunk("b", 0, 4, data, 4*part))
	waitFor(t, "both messages' first chunks", func() bool { return cons.Stats().ReassemblyBytes >= 2*part })
	// An ingress record of 15/16 of the budget: it waits until the reassembly's bytes go.
	ctx, cancel := context.WithCancel(context.Background())
	acquired := make(chan error, 1)
	go func() { acquired <- bud.Acquire(ctx, limit-part) }()
	defer func() {
		cancel()
		if err := <-acquired; err == nil {
			bud.Release(limit - part)
		}
	}()
	waitFor(t, "the Acquire to queue", func() bool { return bud.Stats().Waiting == 1 })
	var rest []pulsartest.Outgoing
	for id := 1; id < 4; id++ {
		rest = append(rest, chunk("a", id, 4, data, 4*part), chunk("b", id, 4, data, 4*part))
	}
	b.Deliver(faultTopic, rest...)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	for range 2 {
		m, err := cons.Receive(rctx)
		if err != nil {
			t.Fatalf("%v; stats %+v, budget %+v", err, cons.Stats(), bud.Stats())
		}
		if m.Size() != 4*part {
			t.Fatalf("a message of %d bytes, want %d", m.Size(), 4*part)
		}
		_ = cons.Ack(m)
		cons.Settled(m)
	}
	if st := cons.Stats(); st.ChunkedDropped != 0 {
		t.Fatalf("stats %+v: a chunked message was dropped and acknowledged while the budget had room for it", st)
	}
}
