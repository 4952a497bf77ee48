package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestTooLargeMetadataFailsOnlyTheMessage (on the real broker): a
// message whose properties alone push its frame above the broker's limit (5 MiB by
// default) fails with ErrMessageTooLarge, chunking on or off; nothing above the limit
// reaches the broker, so it does not close the connection: a consumer on the same
// client keeps receiving, the producer publishes the next message, and neither counts
// a reconnect.
func TestTooLargeMetadataFailsOnlyTheMessage(t *testing.T) {
	b := broker.Get(t)
	c := newOurClient(t, b)
	for _, chunking := range []bool{true, false} {
		t.Run(fmt.Sprintf("chunking=%v", chunking), func(t *testing.T) {
			topic := b.Topic(t, "bigprop")
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s"})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, DisableChunking: !chunking})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			receive := func(want string) {
				t.Helper()
				m, err := cons.Receive(ctx)
				if err != nil {
					t.Fatalf("receiving %q: %v", want, err)
				}
				if string(m.Payload()) != want {
					t.Fatalf("received %q, want %q", m.Payload(), want)
				}
				if err := cons.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
				t.Fatal(err)
			}
			receive("before")
			// A 6 MiB property: no frame, not even a chunk, can carry it.
			huge := map[string]string{"h": strings.Repeat("v", 6<<20)}
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("huge"), Properties: huge}); !errors.Is(err, pulsar.ErrMessageTooLarge) {
				t.Fatalf("a message with a 6 MiB property: %v; want ErrMessageTooLarge", err)
			}
			// A 3 MiB property that fits alone, with a 3 MiB payload: over the limit
			// together. Chunked (each chunk sized from the actual metadata) or refused.
			mid := map[string]string{"h": strings.Repeat("m", 3<<20)}
			payload := bytes.Repeat([]byte("p"), 3<<20)
			_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: payload, Properties: mid})
			switch {
			case chunking && err != nil:
				t.Fatalf("3 MiB with a 3 MiB property: %v; want it chunked", err)
			case !chunking && !errors.Is(err, pulsar.ErrMessageTooLarge):
				t.Fatalf("3 MiB with a 3 MiB property, chunking off: %v; want ErrMessageTooLarge", err)
			}
			if chunking {
				m, err := cons.Receive(ctx)
				if err != nil {
					t.Fatalf("receiving the chunked message: %v", err)
				}
				if !bytes.Equal(m.Payload(), payload) || m.Properties["h"] != mid["h"] {
					t.Fatalf("the chunked message came back with %d bytes, a %d-byte property", len(m.Payload()), len(m.Properties["h"]))
				}
				if err := cons.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				want := fmt.Sprintf("after-%d", i)
				if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(want)}); err != nil {
					t.Fatalf("the next message: %v", err)
				}
				receive(want)
			}
			if ps, cs := p.Stats(), cons.Stats(); ps.Reconnects != 0 || cs.Reconnects != 0 {
				t.Fatalf("the broker closed the connection (producer reconnects %d, consumer %d): a frame above its limit was sent", ps.Reconnects, cs.Reconnects)
			}
		})
	}
}
