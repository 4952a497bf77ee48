package pulsar_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestReceiverQueueBytesBoundsHeldBytes: a slow reader of large messages holds at most
// ReceiverQueueBytes in the consumer's queue (not ReceiverQueueSize messages), and still
// gets every message, in order, including one larger than the bound and a batch.
func TestReceiverQueueBytesBoundsHeldBytes(t *testing.T) {
	const (
		bound = 64 << 10
		size  = 16 << 10
		n     = 40
	)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: bound})
	var out []pulsartest.Outgoing
	var want []string
	for i := range n {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		out = append(out, single(p))
		want = append(want, p)
	}
	huge := "huge" + strings.Repeat("h", 3*bound) // larger than the bound: must still come
	out = append(out, single(huge))
	want = append(want, huge)
	for i := range n {
		p := fmt.Sprintf("%04d", n+i) + strings.Repeat("y", size-4)
		out = append(out, single(p))
		want = append(want, p)
	}
	b.Deliver(faultTopic, out...)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	maxHeld := 0
	for i, w := range want {
		// The slow reader: before each take, wait until the queue holds what the bound
		// lets in, or the broker has used every permit it was given, then look at what
		// the queue holds.
		fill := min(bound/size, len(want)-i)
		for ctx.Err() == nil {
			if _, avail := b.Permits(faultTopic); cons.Buffered() >= fill || (avail == 0 && cons.Buffered() > 0) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		held := cons.Stats().HeldBytes
		maxHeld = max(maxHeld, held)
		// Uniform messages fit the estimate exactly; around the huge one the bound is
		// over-run by at most that one entry.
		limit := bound
		if i >= n-bound/size && i <= n+1 {
			limit = bound + len(huge)
		}
		if held > limit {
			t.Fatalf("before message %d the queue holds %d bytes (%d messages), bound %d", i, held, cons.Buffered(), limit)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, len(want), err)
		}
		if got := string(m.Payload()); got != w {
			t.Fatalf("message %d: got %.8q…, want %.8q…", i, got, w)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
	if held := cons.Stats().HeldBytes; held != 0 {
		t.Fatalf("%d bytes still counted as held after every message was taken", held)
	}
	if maxHeld < bound/2 {
		t.Fatalf("the queue never held more than %d bytes: the test did not exercise the bound %d", maxHeld, bound)
	}
	t.Logf("max held %d bytes, bound %d", maxHeld, bound)
}
