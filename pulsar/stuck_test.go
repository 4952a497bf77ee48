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

// TestASlowBrokerBehindALargeResendIsNotDeclaredDead: after a reconnect the producer
// resends 32 MiB, which a broker starved of CPU reads slowly, saying nothing meanwhile
// (its receipts come later). Its keep-alive PING is queued behind the resend, so the
// broker cannot answer it before it has read all of it; the connection must stay up
// while the writes make progress. The PING's time was taken when it was queued and
// write progress did not count: the live broker was declared dead two intervals
// after the reconnect, and the resend started again on a new connection.
func TestASlowBrokerBehindALargeResendIsNotDeclaredDead(t *testing.T) {
	b := fakeBroker(t)
	// Four-second intervals, not less: on a starved machine (a 2-core CI runner with
	// brokers beside it) the client's own goroutines can wait a second or two for a CPU,
	// which a shorter interval would mistake for a dead broker.
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.KeepAlive = 4 * time.Second
	})
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1, MaxPendingBytes: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), stuckWait)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	b.HoldReceipts(true)
	const n = 32
	payload := make([]byte, 1<<20)
	errs := make(chan error, n)
	for range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	waitUntil(t, ctx, "the first 32 MiB read", func() bool { return b.Frames(pb.BaseCommand_SEND) >= 1+n })
	// About 1.6 MB/s at most: the resend takes 20 s, more than two keep-alive intervals,
	// and each 1 MiB write completes in a fraction of one.
	b.SlowReading(16<<10, 10*time.Millisecond)
	b.DropConnections()
	waitUntil(t, ctx, "the resend read, or a second reconnect", func() bool {
		return b.Frames(pb.BaseCommand_SEND) >= 1+2*n || b.Frames(pb.BaseCommand_CONNECT) > 2
	})
	if got := b.Frames(pb.BaseCommand_CONNECT); got != 2 {
		t.Fatalf("%d CONNECTs, want 2: the broker reading the resend was declared dead (%d SENDs read)", got, b.Frames(pb.BaseCommand_SEND))
	}
	b.SlowReading(0, 0)
	b.HoldReceipts(false)
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages receipted in %s", i, n, stuckWait)
		}
	}
}

// waitUntil polls cond until it holds; it fails the test when ctx ends first.
func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
