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

// fillWindow delivers n messages of size bytes, lets the consumer fill its queue without
// taking anything, and returns the bytes it queued once the broker has used every permit
// it was given; then it takes every message, in order. keptUp: a first message of the
// same size is delivered and taken first, so the application has just left the queue
// empty.
func fillWindow(t *testing.T, opts pulsar.ConsumerOptions, size, n int, keptUp bool) (held int) {
	t.Helper()
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if keptUp {
		b.Deliver(faultTopic, single(strings.Repeat("f", size)))
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cons.Settled(m)
		_ = cons.Ack(m)
	}
	var out []pulsartest.Outgoing
	var want []string
	for i := range n {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		out = append(out, single(p))
		want = append(want, p)
	}
	b.Deliver(faultTopic, out...)
	waitFor(t, "the window to fill", settled(b, cons, n))
	// Nothing is taken, so the queue only grows: two equal readings 20 ms apart say no
	// permit is still bringing an entry.
	waitFor(t, "a quiet reading", func() bool {
		before := cons.Stats().HeldBytes
		time.Sleep(20 * time.Millisecond)
		held = cons.Stats().HeldBytes
		return held == before
	})
	for i, w := range want {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, n, err)
		}
		if got := string(m.Payload()); got != w {
			t.Fatalf("message %d: got %.8q…, want %.8q…", i, got, w)
		}
		cons.Settled(m)
		_ = cons.Ack(m)
	}
	nothingMore(t, cons)
	return held
}

// TestByteWindowGrowsWithTheMessageSize: with the process-wide budget (a MemoryLimiter)
// the byte window of a partition whose application keeps up holds 128 entries of the
// size arriving, up to 8 times ReceiverQueueBytes, so large messages keep the broker
// sending while the application takes them; with a fixed window of ReceiverQueueBytes a
// FLOW of 16 KiB entries brought a handful, and the broker waited between FLOWs. The
// budget still bounds it.
func TestByteWindowGrowsWithTheMessageSize(t *testing.T) {
	const (
		queueBytes = 64 << 10
		size       = 16 << 10
		n          = 80
	)
	window := 8 * queueBytes // 128 entries of 16 KiB would be 2 MiB: the scale caps it
	held := fillWindow(t, pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: queueBytes,
		MemoryLimiter: budget.New(64 << 20), KeepMemoryCharge: true}, size, n, true)
	if held < window-size || held > window+size {
		t.Fatalf("the queue filled to %d bytes (%d messages of %d), want the adapted window %d (ReceiverQueueBytes %d)",
			held, held/size, size, window, queueBytes)
	}

	// The budget bounds the window: 96 KiB of budget, not 512 KiB.
	const limit = 96 << 10
	held = fillWindow(t, pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: queueBytes,
		MemoryLimiter: budget.New(limit), KeepMemoryCharge: true}, size, n, true)
	if held > limit+size {
		t.Fatalf("the queue filled to %d bytes with a budget of %d", held, limit)
	}
}

// TestByteWindowStaysReceiverQueueBytesWhenItCannotHelp: the window does not grow for an
// application that has not kept its queue below half of ReceiverQueueBytes lately (a slow reader gains nothing from
// more in flight, and would only hold more of the budget), nor without a MemoryLimiter
// (nothing but ReceiverQueueBytes bounds memory then).
func TestByteWindowStaysReceiverQueueBytesWhenItCannotHelp(t *testing.T) {
	const (
		queueBytes = 64 << 10
		size       = 16 << 10
	)
	for _, tc := range []struct {
		name   string
		opts   pulsar.ConsumerOptions
		keptUp bool
	}{
		{"a reader that never emptied its queue", pulsar.ConsumerOptions{MemoryLimiter: budget.New(64 << 20), KeepMemoryCharge: true}, false},
		{"no MemoryLimiter", pulsar.ConsumerOptions{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ReceiverQueueSize, tc.opts.ReceiverQueueBytes = 1000, queueBytes
			if held := fillWindow(t, tc.opts, size, 40, tc.keptUp); held > queueBytes {
				t.Fatalf("the queue filled to %d bytes, more than ReceiverQueueBytes %d", held, queueBytes)
			}
		})
	}
}
