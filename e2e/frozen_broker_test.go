package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// events is a slog handler that reports records whose message contains a word.
type events struct {
	word string
	ch   chan string
}

func (h events) Enabled(context.Context, slog.Level) bool { return true }
func (h events) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.word) {
		var reason string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				reason = a.Value.String()
			}
			return true
		})
		select {
		case h.ch <- reason:
		default:
		}
	}
	return nil
}
func (h events) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h events) WithGroup(string) slog.Handler      { return h }

// TestProducerDetectsAFrozenBroker: the real broker is stopped with SIGSTOP while
// megabytes are in flight, so the producer's writer blocks on a full socket. The
// connection is declared dead while the broker is still frozen (keep-alive runs apart
// from the writer), and once the broker resumes every message is persisted on a new
// connection (at least once: without deduplication the frames the frozen broker had
// already buffered may be stored too).
func TestProducerDetectsAFrozenBroker(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("the broker was not started by pulsar.sh, so it cannot be frozen")
	}
	topic := b.Topic(t, "frozen")
	cons := officialSubscribe(t, newOfficialClient(t, b), topic)
	lost := events{word: "disconnected", ch: make(chan string, 1)}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, KeepAlive: time.Second,
		WriteTimeout: 10 * time.Second, Logger: slog.New(lost)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: -1, MaxPendingBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m-00")}); err != nil {
		t.Fatal(err)
	}

	thaw := b.Freeze(t)
	defer thaw() // before the deferred closes, which would wait on a frozen broker
	const n = 24
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		payload := make([]byte, 2<<20) // 48 MiB in all: more than the socket buffers hold
		copy(payload, fmt.Sprintf("m-%02d", i))
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	select {
	case reason := <-lost.ch:
		t.Logf("detected while frozen: %s", reason)
	case <-time.After(30 * time.Second):
		t.Fatal("the frozen broker was not detected within 30 s")
	}
	thaw()
	for i := range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages persisted after the broker resumed", i, n)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n+1 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%d of %d distinct messages read back: %v", len(seen), n+1, err)
		}
		seen[string(m.Payload()[:4])] = true
		cons.Ack(m)
	}
}

// TestAQuietProducerDetectsAFrozenBroker: the real broker is stopped with SIGSTOP while
// a producer goes on sending a few small messages a second, as a quiet stream does. Its
// kernel takes them into socket buffers that are far from full, so every write
// completes at once; the keep-alive took each completed write for the broker reading
// its PING and excused its silence until the buffers filled (at this rate, minutes),
// so the connection stayed up and every message waited on a frozen broker. Declared
// dead while frozen, the connection is replaced once the broker resumes and every
// message is persisted.
func TestAQuietProducerDetectsAFrozenBroker(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("the broker was not started by pulsar.sh, so it cannot be frozen")
	}
	topic := b.Topic(t, "frozen-quiet")
	lost := events{word: "disconnected", ch: make(chan string, 1)}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, KeepAlive: time.Second,
		WriteTimeout: 10 * time.Second, Logger: slog.New(lost)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m-000")}); err != nil {
		t.Fatal(err)
	}

	thaw := b.Freeze(t)
	defer thaw() // before the deferred closes, which would wait on a frozen broker
	errs := make(chan error, 1000)
	sent := 0
	tick := time.NewTicker(200 * time.Millisecond) // ~1 KB/s with the frames' headers
	defer tick.Stop()
	detected := time.After(30 * time.Second)
wait:
	for {
		select {
		case reason := <-lost.ch:
			t.Logf("detected while frozen after %d messages: %s", sent, reason)
			break wait
		case <-detected:
			t.Fatalf("the frozen broker was not detected within 30 s while %d small messages were sent", sent)
		case <-tick.C:
			sent++
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%03d", sent))},
				func(_ pulsar.MessageID, err error) { errs <- err })
		}
	}
	thaw()
	for i := range sent {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages persisted after the broker resumed", i, sent)
		}
	}
}
