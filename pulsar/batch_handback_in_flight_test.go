package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestAnEntryHandedBackTwiceInFlightDeliversEachNackedBatchMateOnce: on a Shared
// subscription a batch-mate is nacked while the entry handed back for an earlier nack is
// on its way back (dispatched again, not yet read), so the broker sends the entry twice.
// Between them the two arrivals deliver each nacked batch-mate once, and never the ones
// the application holds and did not nack.
func TestAnEntryHandedBackTwiceInFlightDeliversEachNackedBatchMateOnce(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b", "held1", "held2"))
	ms := receiveN(t, cons, 4)
	cons.NackAfter(ms[0], 0)
	awaitRedelivers(t, b, 1)
	cons.NackAfter(ms[1], 0) // the entry is on its way back: the broker dispatched it again
	awaitRedelivers(t, b, 2)
	// The broker had dispatched the entry again when the second request came: it sends it twice.
	b.Deliver(faultTopic, batchAt(1, 1, nil, "a", "b", "held1", "held2"), batchAt(1, 2, nil, "a", "b", "held1", "held2"), single("next"))
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Payload()))
		if string(m.Payload()) == "next" {
			break
		}
	}
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	if seen["held1"] > 0 || seen["held2"] > 0 {
		t.Fatalf("delivered again %q: a batch-mate the application holds and never nacked", got)
	}
	if seen["a"] != 1 || seen["b"] != 1 {
		t.Fatalf("delivered %q: each nacked batch-mate should come back once", got)
	}
}

// TestAnEntryHandedBackTwiceButSentOnceKeepsItsTrackerPastTheExpiry: when the second
// hand-back finds the entry not yet dispatched again, the broker sends it once; the
// hand-back record then waits for an arrival that never comes. Its expiry forgets the
// record but not the tracker of an entry that did come back: the application holds its
// batch-mates, and without batch-index acknowledgements only the tracker lets their
// acknowledgements add up to one of the whole entry.
func TestAnEntryHandedBackTwiceButSentOnceKeepsItsTrackerPastTheExpiry(t *testing.T) {
	defer pulsar.SetHandBackExpiry(50 * time.Millisecond)()
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b", "held"))
	ms := receiveN(t, cons, 3)
	cons.NackAfter(ms[0], 0)
	awaitRedelivers(t, b, 1)
	cons.NackAfter(ms[1], 0)
	awaitRedelivers(t, b, 2)
	b.Deliver(faultTopic, batchAt(1, 1, nil, "a", "b", "held"))
	again := receiveN(t, cons, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for pulsar.HandedBack(cons) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the hand-back record never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := cons.Stats().BatchTrackers; n != 1 {
		t.Fatalf("%d batch trackers once the record expired, want the entry's, whose batch-mate the application holds", n)
	}
	for _, m := range append(again, ms[2]) {
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	for !ackedIndexes(b, 1, 3)[2] {
		if ctx.Err() != nil {
			t.Fatal("the whole entry was never acknowledged")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
