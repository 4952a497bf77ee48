package pulsar_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A producer holding its name as a lease (FailWhenNameBusy) loses its registration and,
// before it can register again, another client's producer takes the name: its
// re-registration is refused with ProducerBusy and it fails for good instead of waiting
// for the name. Without the option the same producer keeps trying and gets the name back
// once the other one closes.
func TestProducerFailingWhenItsNameIsBusyStopsOnAReconnectRefusedWithProducerBusy(t *testing.T) {
	for _, failWhenBusy := range []bool{true, false} {
		name := "lease"
		if !failWhenBusy {
			name = "retries"
		}
		t.Run(name, func(t *testing.T) {
			b := fakeBroker(t)
			b.UniqueProducerNames(true)
			const topic = "persistent://public/default/leased-partition-0"
			var taken atomic.Bool
			var tried atomic.Int32 // re-registrations the broker answered itself
			// The first producer's re-registration (epoch above 0) waits until the
			// other one holds the name.
			b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
				if p := c.Cmd.GetProducer(); c.Cmd.GetType() == pulsartest.CommandProducer && p.GetEpoch() > 0 {
					if !taken.Load() {
						return pulsartest.Refuse(pulsartest.ErrServiceNotReady, "not yet")
					}
					tried.Add(1)
				}
				return pulsartest.Pass()
			})
			opts := pulsar.ProducerOptions{Topic: topic, Name: "recordio-bridge/r/s", FailWhenNameBusy: failWhenBusy,
				Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
			first := producer(t, client(t, b.URL()), opts)
			b.CloseProducers()
			second := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: topic, Name: "recordio-bridge/r/s"})
			taken.Store(true)
			if failWhenBusy {
				waitFor(t, "the lease failed", func() bool { return errors.Is(first.Err(), pulsar.ErrProducerFailed) })
				if !strings.Contains(first.Err().Error(), "already connected") {
					t.Fatalf("Err() = %v; want the broker's ProducerBusy", first.Err())
				}
				return
			}
			// A second attempt comes only after the first was answered: ProducerBusy.
			waitFor(t, "a re-registration refused", func() bool { return tried.Load() >= 2 })
			if err := first.Err(); err != nil {
				t.Fatalf("without FailWhenNameBusy: Err() = %v, want the producer still trying", err)
			}
			second.Close()
			if _, err := first.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
				t.Fatalf("once the name is free again: %v", err)
			}
		})
	}
}
