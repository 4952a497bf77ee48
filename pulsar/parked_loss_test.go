package pulsar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestAParkedEntryHandedUpAsItsRegistrationIsLostIsDropped: the drainer delivers a
// parked entry on a goroutine of its own, so a topic unload (CLOSE_CONSUMER, handled on
// the connection's reader) can drop the partition's queue while the drainer is handing
// the entry's messages up. They belong to the lost registration (the broker delivers
// them again on the next one): they must be dropped with the queue, not queued after it
// was emptied, to reach the application from a registration that no longer exists
// (a duplicate of the redelivered copy, its permits granted again on the new one).
func TestAParkedEntryHandedUpAsItsRegistrationIsLostIsDropped(t *testing.T) {
	const (
		budgetBytes = 4 << 20
		large       = 8 << 20
	)
	b := fakeBroker(t)
	bud := budget.New(budgetBytes)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud})
	// A queued message holds part of the budget, so the large entry is parked; taking it
	// lets the drainer deliver the entry.
	b.Deliver(faultTopic, single("first"), compressedOutgoing(t, pb.CompressionType_ZSTD, largeBody(0, large), 0))
	waitFor(t, "the large entry to be parked", func() bool { return cons.Buffered() == 1 && cons.Stats().Parked == 1 })

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer pulsar.SetEnqueueHook(func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	})()
	if got := receiveAll(t, cons, 1); got[0] != "first" {
		t.Fatalf("received %q", got)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the drainer did not hand the parked entry up")
	}
	// The topic is unloaded while the drainer hands the entry up.
	b.CloseConsumers()
	reconnected := make(chan struct{})
	go func() {
		for cons.Stats().Reconnects == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		close(reconnected)
	}()
	select {
	case <-reconnected:
	case <-time.After(500 * time.Millisecond):
		// The loss waits for the hand-up to finish (and then drops what it queued).
	}
	close(release)
	<-reconnected

	b.Deliver(faultTopic, single("after"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload()) != "after" {
		t.Fatalf("received a %d-byte message of the lost registration before the new one's", len(m.Payload()))
	}
	nothingMore(t, cons)
}
