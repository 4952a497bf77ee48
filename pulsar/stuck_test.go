package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// stuckWait bounds the wait for the 24 large messages of the tests below: a missing
// message fails the test instead of hanging it. It is no measure of speed.
const stuckWait = 2 * time.Minute

// TestProducerReconnectsWhenTheBrokerStopsReading: a broker that stops reading (a
// frozen JVM) with large messages in flight blocks the writer on a full socket; the
// connection is declared dead anyway and the producer resends everything on a new one.
// Before liveness had its own goroutine and writes a deadline, the producer timed out
// every message and never reconnected.
func TestProducerReconnectsWhenTheBrokerStopsReading(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.KeepAlive = time.Second
		o.WriteTimeout = time.Hour // liveness alone must notice
	})
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1, MaxPendingBytes: 64 << 20})
	// Generous: under the race detector on a loaded 2-core machine, resending 48 MiB
	// through the fake broker took more than 30 s (15 of 24 messages persisted by then).
	ctx, cancel := context.WithTimeout(context.Background(), stuckWait)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.StopReading()
	const n = 24
	payload := make([]byte, 2<<20) // 48 MiB in all: far more than loopback socket buffers
	errs := make(chan error, n)
	for range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages persisted in %s (%d CONNECTs): the frozen broker was never detected", i, n, stuckWait, b.Frames(pb.BaseCommand_CONNECT))
		}
	}
	if got := b.Frames(pb.BaseCommand_CONNECT); got < 2 {
		t.Fatalf("%d CONNECTs: the frozen connection was never dropped", got)
	}
	if got := len(b.Messages("persistent://public/default/fault")); got < n+1 {
		t.Fatalf("the broker stored %d messages, want at least %d", got, n+1)
	}
}

// TestWriteTimeoutDropsABrokerThatStopsReading: the same frozen broker, with keep-alive
// too slow to notice: the write deadline closes the connection.
func TestWriteTimeoutDropsABrokerThatStopsReading(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.KeepAlive = time.Hour
		o.WriteTimeout = time.Second
	})
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1, MaxPendingBytes: 64 << 20})
	// Generous: under the race detector on a loaded 2-core machine, resending 48 MiB
	// through the fake broker took more than 30 s (15 of 24 messages persisted by then).
	ctx, cancel := context.WithTimeout(context.Background(), stuckWait)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.StopReading()
	const n = 24
	payload := make([]byte, 2<<20)
	errs := make(chan error, n)
	for range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages persisted in %s (%d CONNECTs): the stuck writer was never unblocked", i, n, stuckWait, b.Frames(pb.BaseCommand_CONNECT))
		}
	}
	if got := b.Frames(pb.BaseCommand_CONNECT); got < 2 {
		t.Fatalf("%d CONNECTs: the frozen connection was never dropped", got)
	}
}
