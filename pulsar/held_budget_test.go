package pulsar_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestAnIncompleteChunkedMessageLetsNoHeldMessagePastTheBudget: a producer killed in
// the middle of a chunked message leaves its first chunk on the partition; the
// singles after it are what the partition's next permits bring. While that chunked
// message is "being reassembled" (len(p.chunks)==1, until ChunkExpiry), grantLocked
// grants the idle partition its permit beyond the limiter even though the application
// holds what it took (KeepMemoryCharge, never Settled): each single taken and held
// makes the partition idle again and brings one more past the budget, without bound.
func TestAnIncompleteChunkedMessageLetsNoHeldMessagePastTheBudget(t *testing.T) {
	const (
		limit = 64 << 10
		size  = 8 << 10
		n     = 40
	)
	bud := budget.New(limit)
	bud.Charge(limit) // spent by others (ingress)
	defer bud.Release(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, MemoryLimiter: bud,
		KeepMemoryCharge: true, ChunkExpiry: time.Hour})
	out := []pulsartest.Outgoing{chunk("dead", 0, 2, strings.Repeat("c", size), 2*size)} // its producer died
	for i := range n {
		out = append(out, single(fmt.Sprintf("%04d", i)+strings.Repeat("h", size-4)))
	}
	b.Deliver(faultTopic, out...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []*pulsar.Message
	for {
		short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := cons.Receive(short)
		stop()
		if err != nil {
			break
		}
		held = append(held, m) // taken and held: never Settled
	}
	used := bud.Stats().Used
	t.Logf("took and held %d messages; budget %d bytes (limit %d)", len(held), used, limit)
	// The bound the commit claims: the limit plus about one message per partition (here
	// also the one incomplete chunk).
	if used > limit+3*size {
		t.Fatalf("holding %d taken messages: the budget counts %d bytes, %d beyond its limit (%d messages' worth)",
			len(held), used, used-limit, (used-limit)/size)
	}
	for _, m := range held {
		cons.Settled(m)
	}
}

// TestAPartitionStarvedWhileHoldingRecoversAfterAReconnect: the partition is
// starved while the application holds a message and the budget is spent by others; the
// connection drops and the consumer resubscribes while still starved; once the held
// message is settled the next message comes.
func TestAPartitionStarvedWhileHoldingRecoversAfterAReconnect(t *testing.T) {
	const limit, size = 64 << 10, 8 << 10
	bud := budget.New(limit)
	bud.Charge(limit)
	defer bud.Release(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, MemoryLimiter: bud, KeepMemoryCharge: true})
	b.Deliver(faultTopic, single(strings.Repeat("a", size)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	b.DropConnections()
	waitFor(t, "resubscribed", func() bool { return cons.Stats().Reconnects > 0 })
	b.Deliver(faultTopic, single(strings.Repeat("b", size)))
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	if m2, err := cons.Receive(short); err == nil {
		t.Logf("came while holding (beyond?) %d; budget %d", m2.Size(), bud.Stats().Used)
		cons.Settled(m2)
	}
	stop()
	cons.Settled(m)
	if _, err := cons.Receive(ctx); err != nil {
		t.Fatalf("nothing after the held message was settled: %v (stats %+v, budget %+v)", err, cons.Stats(), bud.Stats())
	}
}

// TestAHeldMessageDoesNotStarveAPartitionAfterALargeMessage: a message larger than the
// budget came once (allowed: an idle partition's one permit goes beyond the limit), so
// the partition's estimate of what a permit brings (permitBytesLocked) is now larger
// than the whole budget. Then the application takes a small message and holds it while
// it waits for the next (a client that acknowledges two at a time): the budget is
// almost empty (a few bytes of 64 KiB used), yet the idle partition is granted nothing:
// while holding, grantLocked only TryReserves one permit at the estimate, which can
// never fit, and the estimate only falls with arrivals that can now never come. The
// partition is stalled until the application settles everything it holds.
func TestAHeldMessageDoesNotStarveAPartitionAfterALargeMessage(t *testing.T) {
	const limit = 64 << 10
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, MemoryLimiter: bud, KeepMemoryCharge: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.Deliver(faultTopic, single(strings.Repeat("L", 100<<10))) // larger than the budget
	big, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons.Settled(big)
	_ = cons.Ack(big)
	b.Deliver(faultTopic, single("small-1"), single("small-2"))
	first, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Hold first; the client wants the second before it acknowledges both.
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	second, err := cons.Receive(short)
	if err != nil {
		t.Fatalf("holding one 7-byte message, the next never came (%v): budget %+v (limit %d), stats %+v",
			err, bud.Stats(), limit, cons.Stats())
	}
	cons.Settled(first)
	cons.Settled(second)
}
