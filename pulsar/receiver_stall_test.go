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

// TestAReaderThatKeptUpThenStallsHoldsOnlyReceiverQueueBytes: a reader of 16 KiB
// messages that took each one as it came and then stopped reading holds no more than
// ReceiverQueueBytes (plus the one entry a permit may bring beyond the estimate), and the
// broker holds no unused permits beyond that either: permits the broker has cannot be
// taken back, so whatever was granted while the reader kept up is what a stalled reader
// ends up holding. A window that grew with the message size while the reader kept up
// (up to 8 times ReceiverQueueBytes with the shared budget) let such a reader hold 8
// times the bound.
func TestAReaderThatKeptUpThenStallsHoldsOnlyReceiverQueueBytes(t *testing.T) {
	const (
		bound = 64 << 10
		size  = 16 << 10
		kept  = 40
		more  = 60
	)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: bound,
		MemoryLimiter: budget.New(64 << 20), KeepMemoryCharge: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	payload := func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4) }
	take := func(i int) {
		t.Helper()
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got, want := string(m.Payload()), payload(i); got != want {
			t.Fatalf("message %d: got %.8q…, want %.8q…", i, got, want)
		}
		cons.Settled(m)
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}

	// Keeping up: each message is taken as soon as it is delivered, so the queue stays
	// below half of the bound.
	for i := range kept {
		b.Deliver(faultTopic, single(payload(i)))
		take(i)
	}
	// Then the reader stalls with a backlog behind it.
	var out []pulsartest.Outgoing
	for i := range more {
		out = append(out, single(payload(kept+i)))
	}
	b.Deliver(faultTopic, out...)
	waitFor(t, "the window to fill", settled(b, cons, more))
	time.Sleep(50 * time.Millisecond) // a FLOW still on its way would show now
	held := cons.Stats().HeldBytes
	_, avail := b.Permits(faultTopic)
	if promised := held + avail*size; promised > bound+size {
		t.Fatalf("a stalled reader holds %d bytes (%d messages) and the broker %d unused permits: %d bytes, "+
			"more than ReceiverQueueBytes %d plus one message", held, held/size, avail, promised, bound)
	}
	if held < bound/2 {
		t.Fatalf("the queue holds %d bytes: the test did not fill the window %d", held, bound)
	}
	for i := range more {
		take(kept + i)
	}
	nothingMore(t, cons)
}
