package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestASendWhoseContextHasEndedIsNeverSent: a message given with a context that has
// already ended fails with the context's error and is not sent, every time, chunked or
// not, even while nothing else holds the producer (the uncontended path takes the
// producer's turn without a select that would notice the context).
func TestASendWhoseContextHasEndedIsNeverSent(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	b.SetMaxMessageSize(16 << 10)
	for _, size := range []int{100, 40 << 10} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			topic := fmt.Sprintf("persistent://public/default/canceled-%d", size)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: topic})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			const n = 64
			errs := make(chan error, n)
			for range n {
				p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: make([]byte, size)}, func(_ pulsar.MessageID, err error) { errs <- err })
			}
			for i := range n {
				if err := <-errs; !errors.Is(err, context.Canceled) {
					t.Fatalf("message %d: %v, want context.Canceled", i, err)
				}
			}
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
				t.Fatal(err)
			}
			if got := b.Messages(topic); len(got) != 1 || string(got[0].Payload) != "after" {
				t.Fatalf("the broker has %d messages, want only the one sent with a live context", len(got))
			}
		})
	}
}
