package pulsar_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// waitFrames waits until the broker has read n SEND frames.
func waitFrames(t *testing.T, b *pulsartest.Broker, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); b.Frames(pulsartest.CommandSend) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the broker read %d SEND frames within 5 s, want %d", b.Frames(pulsartest.CommandSend), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestARefusedBatchIsNamedByItsHighestSequenceID: a broker names a batch it refuses by
// the batch's highest sequence id (the receipt names the lowest). A batch of three
// messages refused as corrupt, with an entry stored behind it, must be recognised as the
// refused entry: taken for an answer out of step, the connection was reset at once, the
// refusal forgotten and the receipt behind it lost, so on a deduplicating topic the
// batch's resend was answered as a duplicate and its three messages reported sent
// though never stored, and without deduplication the entry behind it was stored twice.
func TestARefusedBatchIsNamedByItsHighestSequenceID(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(dedup)
			// Two entries in flight: what comes while both await receipts forms a batch.
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 2, BatchingMaxDelay: time.Hour})
			var mu sync.Mutex
			refused := false
			b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
				mu.Lock()
				defer mu.Unlock()
				if cmd.Cmd.GetType() == pulsartest.CommandSend && !refused && bytes.Contains(cmd.Payload, []byte("m-00002")) {
					refused = true
					return pulsartest.Refuse(pb.ServerError_ChecksumError, "checksum mismatch")
				}
				return pulsartest.Pass()
			})
			b.HoldReceipts(true)
			waitFirst := sendEach(t, p, "m-00000", "m-00001")
			waitStored(t, b, 2)
			waitBatch := sendEach(t, p, "m-00002", "m-00003", "m-00004") // the window is full: one batch
			b.ReleaseReceipts(1)                                         // m-00000's receipt: the batch leaves
			waitFrames(t, b, 3)                                          // and is refused, the refusal held
			b.ReleaseReceipts(1)                                         // m-00001's receipt: room in the window
			waitLast := sendEach(t, p, "m-00005")
			waitStored(t, b, 3)   // m-00005 stored behind the refused batch
			b.HoldReceipts(false) // the refusal, then m-00005's receipt
			results := append(append(waitFirst(10*time.Second), waitBatch(10*time.Second)...), waitLast(10*time.Second)...)
			stored := map[string]int{}
			for _, m := range b.Messages("persistent://public/default/fault") {
				stored[string(m.Payload)]++
			}
			for i, r := range results {
				name := fmt.Sprintf("m-%05d", i)
				switch {
				case stored[name] > 1:
					t.Fatalf("%s stored %d times: an entry the broker had stored was sent again", name, stored[name])
				case r.err == nil && stored[name] == 0:
					t.Fatalf("%s was reported sent (id %v) but the broker does not hold it", name, r.id)
				case r.err != nil && !(dedup && errors.Is(r.err, pulsar.ErrCorruptInTransit)):
					t.Fatalf("%s failed: %v", name, r.err)
				case r.err != nil && stored[name] != 0:
					t.Fatalf("%s failed with %v but is stored", name, r.err)
				}
			}
		})
	}
}

// TestABatchAboveTheTopicsMaxMessageSizeFailsAndTheProducerGoesOn: a batch the broker
// refuses for good (NotAllowedError, above the topic's maxMessageSize) is named by its
// highest sequence id too. Its messages fail with ErrMessageTooLarge and the producer
// goes on; taken for an answer out of step, the connection was reset and the batch
// resent, refused again, without end.
func TestABatchAboveTheTopicsMaxMessageSizeFailsAndTheProducerGoesOn(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 1, BatchingMaxDelay: time.Hour})
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		if cmd.Cmd.GetType() == pulsartest.CommandSend && bytes.Contains(cmd.Payload, []byte("m-00001")) {
			return pulsartest.Refuse(pb.ServerError_NotAllowedError, "Exceed maximum message size")
		}
		return pulsartest.Pass()
	})
	b.HoldReceipts(true)
	waitFirst := sendEach(t, p, "m-00000")
	waitStored(t, b, 1)
	waitBatch := sendEach(t, p, "m-00001", "m-00002") // behind m-00000: one batch
	b.HoldReceipts(false)
	results := append(waitFirst(10*time.Second), waitBatch(10*time.Second)...)
	if results[0].err != nil {
		t.Fatalf("m-00000: %v", results[0].err)
	}
	for i, r := range results[1:] {
		if !errors.Is(r.err, pulsar.ErrMessageTooLarge) {
			t.Fatalf("m-%05d: err = %v, want ErrMessageTooLarge", i+1, r.err)
		}
	}
	if r := sendEach(t, p, "m-00003")(10 * time.Second)[0]; r.err != nil {
		t.Fatalf("the producer did not go on after the refused batch: %v", r.err)
	}
	if n := b.Frames(pulsartest.CommandSend); n != 3 {
		t.Fatalf("the broker read %d SEND frames, want 3 (the refused batch sent once)", n)
	}
}
