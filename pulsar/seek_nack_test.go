package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestANackFromBeforeASeekAsksForNoRedeliveryAfterIt: a message nacked before a seek is
// from the old position; the subscription has moved, and what the consumer received
// from the new one must not be sent back by that nack coming due (on an exclusive
// subscription that is a redelivery of everything unacknowledged: the new messages came
// twice; on a shared one, the old ids redelivered).
func TestANackFromBeforeASeekAsksForNoRedeliveryAfterIt(t *testing.T) {
	for _, typ := range []pulsar.SubscriptionType{pulsar.Exclusive, pulsar.Shared} {
		t.Run(typ.String(), func(t *testing.T) {
			b := fakeBroker(t)
			cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: typ, AckGroupTime: 5 * time.Millisecond})
			b.Deliver(faultTopic, single("old"))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cons.NackAfter(m, 150*time.Millisecond)
			if err := cons.SeekByTime(ctx, time.UnixMilli(1_780_000_000_000)); err != nil {
				t.Fatal(err)
			}
			waitSubscribes(t, b, 2)
			b.Deliver(faultTopic, single("new"))
			if got := receiveAll(t, cons, 1); got[0] != "new" {
				t.Fatalf("after the seek got %v, want [new]", got)
			}
			time.Sleep(600 * time.Millisecond) // the nack's delay, and the consumer's look at its nacks
			if r := b.Redelivers(faultTopic); len(r) != 0 {
				t.Fatalf("the broker was asked to redeliver %d times after the seek (%+v): a nack from before it", len(r), r)
			}
			nothingMore(t, cons)
		})
	}
}
