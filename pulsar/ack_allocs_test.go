package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestAckOfAMessageAllocatesOnce: acknowledging a message of its own entry (grouped)
// costs one allocation, its id; it made four (the id, its two optional fields and a
// slice carrying it), paid for every message a stream acknowledges.
func TestAckOfAMessageAllocatesOnce(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{AckGroupMax: 1 << 20, AckGroupTime: time.Hour})
	b.Deliver(faultTopic, single("one"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The same message each time: its group entry is replaced, so the map never grows.
	if n := testing.AllocsPerRun(1000, func() { _ = cons.Ack(m) }); n > 1 {
		t.Fatalf("an acknowledgement makes %v allocations, want at most 1", n)
	}
}
