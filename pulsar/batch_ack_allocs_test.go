package pulsar_test

import (
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestAckOfABatchsMessagesKeepsOneIDPerEntry: with batch-index acknowledgements, the
// messages of a batch acknowledged in one group share their entry's one id, whose ack
// set is brought up to date: acknowledging a further message of the entry allocates
// nothing (it made four allocations, an id, its ack set, its batch size and a slice,
// replacing the ones before), and the broker is told every index acknowledged, the
// entry whole once all of them are.
func TestAckOfABatchsMessagesKeepsOneIDPerEntry(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{BatchIndexAck: true, AckGroupMax: 1 << 20, AckGroupTime: time.Hour})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b", "c", "d"), batchAt(2, 0, nil, "e", "f"))
	ms := receiveN(t, cons, 6)
	if err := cons.Ack(ms[0]); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = cons.Ack(ms[2]) }); n > 0 {
		t.Fatalf("acknowledging a further message of a batch makes %v allocations, want none", n)
	}
	_ = cons.Ack(ms[4])
	_ = cons.Ack(ms[5])
	cons.Close() // sends the group
	deadline := time.Now().Add(10 * time.Second)
	for len(b.Acks(faultTopic)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	acks := b.Acks(faultTopic)
	if len(acks) != 1 {
		t.Fatalf("%d ACK frames, want the one group", len(acks))
	}
	perEntry := map[uint64]int{}
	for _, id := range acks[0].IDs {
		perEntry[id.GetEntryId()]++
	}
	if perEntry[1] != 1 || perEntry[2] != 1 || len(acks[0].IDs) != 2 {
		t.Fatalf("the group names entries %v (ids per entry), want 1 and 2 once each", perEntry)
	}
	if got := ackedIndexes(b, 1, 4); !got[0] || got[1] || !got[2] || got[3] {
		t.Fatalf("the broker knows indexes %v of entry 1 acknowledged, want 0 and 2", got)
	}
	for _, id := range acks[0].IDs {
		if id.GetEntryId() == 2 && (len(id.GetAckSet()) != 0 || id.BatchSize != nil) {
			t.Fatalf("entry 2, acknowledged whole, went with ack set %v and batch size %d", id.GetAckSet(), id.GetBatchSize())
		}
	}
}
