package pulsar_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestReleasedMessagesLetTheirFrameBeReused: a consumer reading batches whose messages
// are released (Message.Release) once read reads them into a few reused buffers, not
// one fresh allocation per frame, and a message still held keeps its payload intact
// while later frames are read and its siblings released (a released frame is filled
// with poison here, so a payload read after its frame went back shows it), across a
// reconnection too.
func TestReleasedMessagesLetTheirFrameBeReused(t *testing.T) {
	defer pulsartest.PoisonReleasedFrames(pulsartest.PoisonReleasedFrames(true))
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds, perBatch = 100, 16
	payload := func(r, i int) string {
		return string(bytes.Repeat(fmt.Appendf(nil, "%03d-%02d|", r, i), 1024/7)[:1000])
	}
	var held *pulsar.Message // the last message of the round before, released a round late
	var heldWant string
	before := pulsar.FrameBuffersMade()
	for r := range rounds {
		ps := make([]string, perBatch)
		for i := range ps {
			ps[i] = payload(r, i)
		}
		if r == rounds/2 {
			b.DropConnections() // the held message outlives its connection
		}
		b.Deliver(faultTopic, batchOf(ps...))
		var got []*pulsar.Message
		for len(got) < perBatch {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
			if m.RedeliveryCount > 0 || m.ID.BatchIndex != int32(len(got)) {
				continue // sent again after the reconnection
			}
			if string(m.Payload()) != ps[len(got)] {
				t.Fatalf("round %d message %d reads %.16q..., want %.16q...", r, len(got), m.Payload(), ps[len(got)])
			}
			got = append(got, m)
		}
		if held != nil {
			if string(held.Payload()) != heldWant {
				t.Fatalf("round %d: the message held from the round before reads %.16q..., want %.16q...: its frame was reused while it was held", r, held.Payload(), heldWant)
			}
			held.Release()
		}
		for _, m := range got[:perBatch-1] {
			m.Release()
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
		held, heldWant = got[perBatch-1], ps[perBatch-1]
		if err := cons.Ack(held); err != nil {
			t.Fatal(err)
		}
	}
	held.Release()
	held.Release() // a second call does nothing
	if len(held.Payload()) != 0 {
		t.Fatalf("a released message's payload is %d bytes, want none", len(held.Payload()))
	}
	made := pulsar.FrameBuffersMade() - before
	t.Logf("%d frames read into %d fresh buffers", rounds, made)
	if !raceEnabled && made > rounds/5 {
		// The pool keeps what is put back across one collection; the race detector's
		// drops a quarter of it at random.
		t.Fatalf("%d frames read into %d fresh buffers, want most reused (at most %d fresh)", rounds, made, rounds/5)
	}
}
