package pulsar_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestABatchLeavesWhenARefusalForGoodMakesRoomInTheWindow: a batch held behind a full
// window leaves as soon as an entry leaves the window, whether the broker answered it
// with a receipt or refused it for good (NotAllowedError, a message above the topic's
// maxMessageSize): with a window of one, the messages queued behind a refused lone
// message waited for BatchingMaxDelay (here an hour) with nothing in flight.
func TestABatchLeavesWhenARefusalForGoodMakesRoomInTheWindow(t *testing.T) {
	b := fakeBroker(t)
	var sends atomic.Int32
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandSend && sends.Add(1) == 1 {
			return pulsartest.Refuse(pulsartest.ErrNotAllowed, "too large for the topic")
		}
		return pulsartest.Pass()
	})
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 1, BatchingMaxDelay: time.Hour})
	b.HoldReceipts(true)
	errs := make(chan error, 3)
	send := func(payload string) {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	send("refused")
	waitFor(t, "the first message written", func() bool { return sends.Load() == 1 })
	send("b")
	send("c")
	time.Sleep(50 * time.Millisecond)
	if n := sends.Load(); n != 1 {
		t.Fatalf("%d entries written behind an unanswered one with a window of one", n)
	}
	b.ReleaseReceipts(1) // the refusal
	if err := <-errs; err == nil {
		t.Fatal("the refused message was reported sent")
	}
	waitFor(t, "the batch written once the refused entry left the window", func() bool { return sends.Load() == 2 })
	b.HoldReceipts(false)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Messages(faultTopic); len(got) != 2 {
		t.Fatalf("%d messages stored; want the two behind the refused one", len(got))
	}
}

// TestABatchHeldDuringADrainLeavesOnTheNewConnection: messages sent while the producer
// reads the answers behind a refusal (ChecksumError) wait in the open batch; once the
// connection is reset and the refused entry resent, the window has room for them and
// they leave with it, not one round trip later with the resent entry's receipt (or, with
// nothing resent, after BatchingMaxDelay: here an hour).
func TestABatchHeldDuringADrainLeavesOnTheNewConnection(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 3, BatchingMaxDelay: time.Hour})
	b.HoldReceipts(true)
	b.CorruptNextSends(1)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	send := func(payload string) {
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, err error) {
			errs <- err
			wg.Done()
		})
	}
	send("a") // refused as corrupt
	send("b") // stored
	waitFor(t, "the second entry stored", func() bool { return len(b.Messages(faultTopic)) == 1 })
	b.ReleaseReceipts(1) // the refusal: the producer drains, awaiting b's receipt
	time.Sleep(50 * time.Millisecond)
	send("c")
	send("d")
	time.Sleep(50 * time.Millisecond)
	if got := len(b.Messages(faultTopic)); got != 1 {
		t.Fatalf("%d messages stored; nothing is written on a connection being drained", got)
	}
	b.ReleaseReceipts(1) // b's receipt ends the drain: reset, a resent
	waitFor(t, "the batch held during the drain written on the new connection, with one entry of three in flight",
		func() bool { return len(b.Messages(faultTopic)) == 4 })
	b.HoldReceipts(false)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
