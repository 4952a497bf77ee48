package pulsar_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// sendTally counts the callbacks of every message sent, to check each runs exactly once.
type sendTally struct {
	mu    sync.Mutex
	calls map[int]int
	sent  atomic.Int64
	done  sync.WaitGroup
}

func (s *sendTally) send(ctx context.Context, p *pulsar.Producer, i int) {
	s.done.Add(1)
	s.sent.Add(1)
	p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}, func(_ pulsar.MessageID, _ error) {
		s.mu.Lock()
		s.calls[i]++
		s.mu.Unlock()
		s.done.Done()
	})
}

func (s *sendTally) check(t *testing.T) {
	t.Helper()
	all := make(chan struct{})
	go func() { s.done.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("callbacks missing: %d of %d messages called back", len(s.calls), s.sent.Load())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range s.calls {
		if n != 1 {
			t.Fatalf("message %d called back %d times", i, n)
		}
	}
	if int64(len(s.calls)) != s.sent.Load() {
		t.Fatalf("%d of %d messages called back", len(s.calls), s.sent.Load())
	}
}

// TestProducerCloseContextRacingSends: sends racing a CloseContext whose ctx ends while
// receipts are held: CloseContext returns, and every send is called back exactly once
// (persisted, failed with ErrProducerClosed, or refused after the close).
func TestProducerCloseContextRacingSends(t *testing.T) {
	b := fakeBroker(t)
	b.HoldReceipts(true)
	c := client(t, b.URL())
	p := producer(t, c, pulsar.ProducerOptions{})
	tally := &sendTally{calls: map[int]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 50 {
		tally.send(ctx, p, i)
	}
	stopSending := make(chan struct{})
	var senders sync.WaitGroup
	for g := range 4 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := 0; ; i++ {
				select {
				case <-stopSending:
					return
				default:
				}
				tally.send(ctx, p, 100000*(g+1)+i)
				if i > 2000 {
					return
				}
			}
		}()
	}
	closeCtx, stop := context.WithCancel(context.Background())
	stop() // the deadline has passed already
	closed := make(chan error, 1)
	go func() { closed <- p.CloseContext(closeCtx) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("CloseContext with an ended ctx did not return")
	}
	close(stopSending)
	senders.Wait()
	tally.check(t)
}

// TestClientCloseContextWhileReconnecting: the client closes (its ctx ended) while a
// producer waits to reconnect and a consumer is resubscribing: it returns, every send
// is called back once, and no goroutine is left (goleak).
func TestClientCloseContextWhileReconnecting(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	p := producer(t, c, pulsar.ProducerOptions{})
	cons := subscribe(t, c, pulsar.ConsumerOptions{})
	_ = cons
	tally := &sendTally{calls: map[int]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_ServiceNotReady, pb.ServerError_ServiceNotReady, pb.ServerError_ServiceNotReady)
	b.RefuseNext(pb.BaseCommand_SUBSCRIBE, pb.ServerError_ServiceNotReady, pb.ServerError_ServiceNotReady, pb.ServerError_ServiceNotReady)
	b.DropConnections()
	for i := range 20 {
		tally.send(ctx, p, i)
	}
	waitFor(t, "a refused re-registration", func() bool { return b.Refusals(pb.BaseCommand_PRODUCER) > 0 })
	closeCtx, stop := context.WithCancel(context.Background())
	stop()
	done := make(chan error, 1)
	go func() { done <- c.CloseContext(closeCtx) }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("CloseContext: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Client.CloseContext with an ended ctx did not return")
	}
	tally.check(t)
}
