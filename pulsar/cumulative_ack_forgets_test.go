package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestACumulativeAckForgetsTheBatchTrackersItCovers: on an Exclusive or Failover
// subscription (egress acknowledges through=N cumulatively there) a cumulative
// acknowledgement settles every batch before it, and their trackers go with it: kept,
// there would be one per batch entry ever consumed, until the connection is lost.
func TestACumulativeAckForgetsTheBatchTrackersItCovers(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Exclusive, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	const batches = 20
	for e := range batches {
		b.Deliver(faultTopic, batchAt(uint64(e+1), 0, nil, "a", "b"))
	}
	ms := receiveN(t, cons, 2*batches)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.AckCumulative(ctx, ms[len(ms)-1]); err != nil {
		t.Fatal(err)
	}
	if n := cons.Stats().BatchTrackers; n != 0 {
		t.Fatalf("%d batch trackers kept after a cumulative acknowledgement of all %d batches", n, batches)
	}
}

// TestACumulativeAckInsideABatchKeepsOnlyItsEntrysLaterIndexes: a cumulative
// acknowledgement through index 1 of a batch of 3 forgets the batches before it and, of
// its own entry, indexes 0 and 1 and their nacks: the nack of index 2 still stands, and
// the entry's tracker goes when index 2 is acknowledged.
func TestACumulativeAckInsideABatchKeepsOnlyItsEntrysLaterIndexes(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Exclusive, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b"), batchAt(2, 0, nil, "c", "d", "e"))
	ms := receiveN(t, cons, 5)
	for _, m := range ms {
		cons.NackAfter(m, time.Hour) // due long after the test: only an acknowledgement forgets them
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.AckCumulative(ctx, ms[3]); err != nil { // "d": entry 2, index 1
		t.Fatal(err)
	}
	if n := cons.Stats().BatchTrackers; n != 1 {
		t.Fatalf("%d batch trackers after a cumulative acknowledgement inside the second batch, want its own", n)
	}
	if n := pulsar.PendingNacks(cons); n != 1 {
		t.Fatalf("%d entries still to ask back, want the second batch's, for the nack of its index 2", n)
	}
	cons.Ack(ms[4])
	if n := cons.Stats().BatchTrackers; n != 0 {
		t.Fatalf("%d batch trackers once every index is acknowledged", n)
	}
	if n := pulsar.PendingNacks(cons); n != 0 {
		t.Fatalf("%d entries still to ask back once every nacked message is acknowledged", n)
	}
}

// TestACumulativeAckForgetsTheNacksItCovers: a message nacked and then covered by a
// cumulative acknowledgement is not asked back later; on an Exclusive subscription that
// would redeliver everything unacknowledged, duplicates of all the application holds.
func TestACumulativeAckForgetsTheNacksItCovers(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Exclusive, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "x"), batchAt(2, 0, nil, "a", "b"), batchAt(3, 0, nil, "y"))
	ms := receiveN(t, cons, 4)
	cons.NackAfter(ms[0], time.Hour)
	cons.NackAfter(ms[1], time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.AckCumulative(ctx, ms[3]); err != nil {
		t.Fatal(err)
	}
	if n := pulsar.PendingNacks(cons); n != 0 {
		t.Fatalf("%d entries still to ask back after a cumulative acknowledgement covering their nacks", n)
	}
}
