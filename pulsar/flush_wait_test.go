package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A Flush waits until everything sent before it is answered, and returns as soon as it
// is: each receipt wakes it (the channel it waits on is made by the flush that waits,
// not afresh at every receipt).
func TestAFlushWaitsForEveryReceiptAndNoLonger(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: "persistent://public/default/flush-wait"})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	b.HoldReceipts(true)
	for i := range 3 {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte{byte(i)}}, nil)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for b.Frames(pulsartest.CommandSend) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the flush sent the open batch, or the window the messages
	}
	select {
	case err := <-flushed:
		t.Fatalf("the flush returned (%v) with every receipt held", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.HoldReceipts(false) // the held receipts are answered, in order
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the flush still waits 10 s after every receipt was answered")
	}
	if n := len(b.Messages("persistent://public/default/flush-wait")); n != 4 {
		t.Fatalf("%d messages stored, want 4", n)
	}
}
