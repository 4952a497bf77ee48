package pulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// waitRefusalsUsed waits until the broker has used want of the refusals queued for t.
func waitRefusalsUsed(t *testing.T, refuse func() int, queued, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for queued-refuse() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the broker used %d refusals, want %d", queued-refuse(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A creation whose caller cancels it while it waits out a transient refusal's backoff
// must say it was cancelled (errors.Is(err, context.Canceled)): the egress subscriber
// and the ingress pool pass a cancellation through as such and classify everything
// else as a broker failure.
func TestACreationCancelledInItsBackoffSaysCancelled(t *testing.T) {
	for _, kind := range []string{"producer", "consumer"} {
		t.Run(kind, func(t *testing.T) {
			b := fakeBroker(t)
			c := client(t, b.URL())
			const queued = 100
			codes := make([]pb.ServerError, queued)
			for i := range codes {
				codes[i] = pb.ServerError_ServiceNotReady
			}
			b.RefuseNext(pb.BaseCommand_LOOKUP, codes...)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			backoff := pulsar.Backoff{Initial: time.Second}
			go func() {
				var err error
				if kind == "producer" {
					var p *pulsar.Producer
					p, err = c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "cancelled", Backoff: backoff})
					if p != nil {
						p.Close()
					}
				} else {
					var cons *pulsar.Consumer
					cons, err = c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{"cancelled"}, Subscription: "s", Backoff: backoff})
					if cons != nil {
						cons.Close()
					}
				}
				errc <- err
			}()
			waitRefusalsUsed(t, func() int { return b.Refusals(pb.BaseCommand_LOOKUP) }, queued, 1)
			time.Sleep(50 * time.Millisecond) // in the backoff wait now
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("creation cancelled by its caller returned %v; want an error matching context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled creation did not return")
			}
		})
	}
}

// Client.Close while a creation waits out a refusal's backoff ends the wait at once
// with ErrClientClosed (it went on waiting, up to 2.4 s, then tried a closed pool and
// reported a closed connection).
func TestClientCloseEndsACreationInItsBackoff(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	const queued = 100
	codes := make([]pb.ServerError, queued)
	for i := range codes {
		codes[i] = pb.ServerError_MetadataError
	}
	b.RefuseNext(pb.BaseCommand_LOOKUP, codes...)
	errc := make(chan error, 1)
	go func() {
		p, err := c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "closing", Backoff: pulsar.Backoff{Initial: 2 * time.Second}})
		if p != nil {
			p.Close()
		}
		errc <- err
	}()
	waitRefusalsUsed(t, func() int { return b.Refusals(pb.BaseCommand_LOOKUP) }, queued, 1)
	time.Sleep(50 * time.Millisecond)
	closed := time.Now()
	c.Close()
	select {
	case err := <-errc:
		d := time.Since(closed)
		if d > 500*time.Millisecond {
			t.Errorf("CreateProducer went on for %s after Client.Close", d)
		}
		if !errors.Is(err, pulsar.ErrClientClosed) {
			t.Errorf("CreateProducer after Client.Close: %v; want ErrClientClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the creation did not end")
	}
}
