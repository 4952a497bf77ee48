package pulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestASendTimeoutDuringADrainResetsTheConnectionAtOnce: the producer reads the answers
// behind a refused entry, and the send timeout fails everything pending meanwhile
// (without deduplication the producer goes on). Nothing is left for the drain to wait
// for: the connection must be reset at once, so a new message goes out on the next one
// instead of waiting for the drain's own timer (here 8 s after the refusal was read, which
// comes 7.5 s after the send; the 4 s bound leaves a loaded machine room either way).
func TestASendTimeoutDuringADrainResetsTheConnectionAtOnce(t *testing.T) {
	const sendTimeout = 8 * time.Second
	b := fakeBroker(t)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 30 * time.Second })
	p := producer(t, c, pulsar.ProducerOptions{BatchingMaxInFlight: 8, BatchingMaxDelay: time.Hour, SendTimeout: sendTimeout})
	b.HoldReceipts(true)
	b.CorruptNextSends(1)
	start := time.Now()
	wait := sendEach(t, p, "m-00000", "m-00001")
	waitStored(t, b, 1) // m-00001, behind the refused m-00000; its receipt stays held
	// The refusal is read late, so the drain's timer would end it well after the send
	// timeout.
	time.Sleep(sendTimeout - 500*time.Millisecond - time.Since(start))
	b.ReleaseReceipts(1)
	for i, r := range wait(20 * time.Second) {
		if !errors.Is(r.err, pulsar.ErrSendTimeout) {
			t.Fatalf("m-%05d: err = %v, want ErrSendTimeout", i, r.err)
		}
	}
	sent := time.Now()
	done := make(chan error, 1)
	p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00002")}, func(_ pulsar.MessageID, err error) { done <- err })
	for {
		stored := false
		for _, m := range b.Messages("persistent://public/default/fault") {
			stored = stored || string(m.Payload) == "m-00002"
		}
		if stored {
			break
		}
		// The drain's timer fires 4 s after the refusal was read, at least 3 s from now.
		if time.Since(sent) > 4*time.Second {
			t.Fatal("m-00002 was not written within 4 s of the send timeout: the drain it emptied still holds the connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.HoldReceipts(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("m-00002: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("m-00002 was not settled within 20 s")
	}
}
