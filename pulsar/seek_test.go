package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// waitBuffered waits until the consumer holds n messages in its queue.
func waitBuffered(t *testing.T, cons *pulsar.Consumer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for cons.Buffered() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages queued, want %d", cons.Buffered(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSubscribes waits until the broker has had n SUBSCRIBE frames.
func waitSubscribes(t *testing.T, b *pulsartest.Broker, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Frames(pulsartest.CommandSubscribe) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d SUBSCRIBE frames, want %d", b.Frames(pulsartest.CommandSubscribe), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSeekByTimeMovesEveryPartitionAndDropsWhatWasQueued(t *testing.T) {
	b := fakeBroker(t)
	b.SetPartitions(faultTopic, 3)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{})
	for i := range 3 {
		b.Deliver(fmt.Sprintf("%s-partition-%d", faultTopic, i), single(fmt.Sprint("old-", i)), single(fmt.Sprint("old-", i)))
	}
	waitBuffered(t, cons, 6)
	at := time.UnixMilli(1_780_000_000_123)
	if err := cons.SeekByTime(context.Background(), at); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		topic := fmt.Sprintf("%s-partition-%d", faultTopic, i)
		s := b.Seeks(topic)
		if len(s) != 1 || s[0].ID != nil || s[0].PublishTime != uint64(at.UnixMilli()) {
			t.Fatalf("%s: seeks %+v, want one by publish time %d", topic, s, at.UnixMilli())
		}
	}
	if n := cons.Buffered(); n != 0 {
		t.Fatalf("%d messages from before the seek still queued", n)
	}
	waitSubscribes(t, b, 6) // every partition subscribed again after the broker closed it
	for i := range 3 {
		b.Deliver(fmt.Sprintf("%s-partition-%d", faultTopic, i), single(fmt.Sprint("new-", i)))
	}
	got := map[string]bool{}
	for _, p := range receiveAll(t, cons, 3) {
		got[p] = true
	}
	if !got["new-0"] || !got["new-1"] || !got["new-2"] {
		t.Fatalf("after the seek got %v, want new-0, new-1 and new-2 only", got)
	}
	nothingMore(t, cons)
}

func TestSeekToAMessageInsideABatchReplaysFromTheMessageAfterIt(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10})
	id := pulsar.MessageID{LedgerID: 7, EntryID: 5, Partition: -1, BatchIndex: 2}
	if err := cons.Seek(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	s := b.Seeks(faultTopic)
	if len(s) != 1 || s[0].ID.GetLedgerId() != 7 || s[0].ID.GetEntryId() != 5 {
		t.Fatalf("seeks %+v, want one to 7:5", s)
	}
	waitSubscribes(t, b, 2)
	first := batchOf("a", "b", "c", "d", "e")
	first.LedgerID, first.EntryID = 7, 5
	next := batchOf("f", "g")
	next.LedgerID, next.EntryID = 7, 6
	b.Deliver(faultTopic, first, next)
	got := receiveAll(t, cons, 4)
	if fmt.Sprint(got) != "[d e f g]" {
		t.Fatalf("after seeking to 7:5 index 2 got %v, want [d e f g], as the Java client replays", got)
	}
	nothingMore(t, cons)
	// The messages left out count as acknowledged: their permits went back.
	if _, available := b.Permits(faultTopic); available <= 0 {
		t.Fatalf("%d permits left at the broker: the messages left out kept theirs", available)
	}
}

func TestARefusedSeekBringsBackWhatItDroppedFromTheQueue(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{})
	b.Deliver(faultTopic, single("m1"), single("m2"))
	waitBuffered(t, cons, 2)
	b.RefuseNext(pulsartest.CommandSeek, pulsartest.ErrNotAllowed)
	err := cons.Seek(context.Background(), pulsar.MessageID{LedgerID: 7, EntryID: 1, Partition: -1, BatchIndex: -1})
	var se *pulsar.ServerError
	if !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pulsartest.ErrNotAllowed) {
		t.Fatalf("seek error %v, want the broker's NotAllowed", err)
	}
	// Nothing moved, so what the seek dropped from the queue is asked for again.
	deadline := time.Now().Add(5 * time.Second)
	for len(b.Redelivers(faultTopic)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no REDELIVER_UNACKNOWLEDGED_MESSAGES after the refused seek: its dropped messages would never come back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Deliver(faultTopic, single("m1"), single("m2")) // the broker's redelivery
	if got := receiveAll(t, cons, 2); fmt.Sprint(got) != "[m1 m2]" {
		t.Fatalf("got %v, want [m1 m2] again", got)
	}
}

func TestStartTimeSeeksEveryPartitionOnceSubscribed(t *testing.T) {
	b := fakeBroker(t)
	b.SetPartitions(faultTopic, 2)
	at := time.UnixMilli(1_780_000_000_000)
	subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{StartTime: at})
	for i := range 2 {
		topic := fmt.Sprintf("%s-partition-%d", faultTopic, i)
		if s := b.Seeks(topic); len(s) != 1 || s[0].PublishTime != uint64(at.UnixMilli()) {
			t.Fatalf("%s: seeks %+v, want one by publish time %d when Subscribe returns", topic, s, at.UnixMilli())
		}
	}
}

func TestSeekRefusesAnIDOfNoPartitionOfThePartitionedTopic(t *testing.T) {
	b := fakeBroker(t)
	b.SetPartitions(faultTopic, 2)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{})
	for _, p := range []int32{-1, 2} {
		err := cons.Seek(context.Background(), pulsar.MessageID{LedgerID: 1, EntryID: 1, Partition: p, BatchIndex: -1})
		if !errors.Is(err, pulsar.ErrInvalidMessageID) {
			t.Fatalf("partition %d: %v, want ErrInvalidMessageID", p, err)
		}
	}
	if n := b.Frames(pulsartest.CommandSeek); n != 0 {
		t.Fatalf("%d SEEK frames sent for ids naming no partition", n)
	}
}

func TestSeekToAMessageNotBatchedReplaysFromTheMessageAfterItAndAcknowledgesIt(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{AckGroupTime: 10 * time.Millisecond})
	if err := cons.Seek(context.Background(), pulsar.MessageID{LedgerID: 7, EntryID: 1, Partition: -1, BatchIndex: -1}); err != nil {
		t.Fatal(err)
	}
	waitSubscribes(t, b, 2)
	at := single("at")
	at.LedgerID, at.EntryID = 7, 1
	after := single("after")
	after.LedgerID, after.EntryID = 7, 2
	last := batchOf("x", "y")
	last.LedgerID, last.EntryID = 7, 3
	b.Deliver(faultTopic, at, after, last)
	if got := receiveAll(t, cons, 3); fmt.Sprint(got) != "[after x y]" {
		t.Fatalf("after seeking to 7:1 got %v, want [after x y], as the Java client replays", got)
	}
	nothingMore(t, cons)
	deadline := time.Now().Add(5 * time.Second)
	for {
		acked := false
		for _, a := range b.Acks(faultTopic) {
			for _, id := range a.IDs {
				acked = acked || id.GetLedgerId() == 7 && id.GetEntryId() == 1
			}
		}
		if acked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("7:1, before the seek's position, was left out but never acknowledged: it would stay in the backlog")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSeekToTheLastMessageOfABatchLeavesOutTheWholeEntry(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{})
	if err := cons.Seek(context.Background(), pulsar.MessageID{LedgerID: 7, EntryID: 5, Partition: -1, BatchIndex: 2}); err != nil {
		t.Fatal(err)
	}
	waitSubscribes(t, b, 2)
	whole := batchOf("a", "b", "c")
	whole.LedgerID, whole.EntryID = 7, 5
	b.Deliver(faultTopic, whole, single("next"))
	if got := receiveAll(t, cons, 1); fmt.Sprint(got) != "[next]" {
		t.Fatalf("got %v, want [next]", got)
	}
	nothingMore(t, cons)
}
