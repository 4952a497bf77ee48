package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// reassemble joins each chunked message's chunks (consecutive, same sequence id) and
// returns the payloads in topic order.
func reassemble(t *testing.T, msgs []pulsartest.Message) [][]byte {
	t.Helper()
	var out [][]byte
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Chunk < 0 {
			out = append(out, m.Payload)
			continue
		}
		if m.Chunk != 0 {
			t.Fatalf("message %d: chunk %d without its first chunk", i, m.Chunk)
		}
		joined := append([]byte(nil), m.Payload...)
		for i+1 < len(msgs) && msgs[i+1].Chunk > 0 && msgs[i+1].SequenceID == m.SequenceID {
			i++
			joined = append(joined, msgs[i].Payload...)
		}
		out = append(out, joined)
	}
	return out
}

// TestSendAsyncKeepsNoCallerMemoryAndOrder: with a broker limit small enough that every
// other record is chunked, SendAsync is given one buffer that the caller overwrites as
// soon as SendAsync returns (as ingress's read buffer is). Every record must be
// published with its own bytes, chunked and small ones in the order they were sent.
func TestSendAsyncKeepsNoCallerMemoryAndOrder(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	b.SetMaxMessageSize(16 << 10)
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			topic := fmt.Sprintf("persistent://public/default/nokeep-%v", batching)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
			const n = 40
			buf := make([]byte, 48<<10)
			var want [][]byte
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			wg.Add(n)
			for i := range n {
				size := 100 + i
				if i%2 == 0 {
					size = 40<<10 + i // chunked: three chunks
				}
				rec := buf[:size]
				for j := range rec {
					rec[j] = byte('a' + i%26)
				}
				want = append(want, bytes.Clone(rec))
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: rec}, func(_ pulsar.MessageID, err error) {
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					wg.Done()
				})
				for j := range buf { // the caller reuses its buffer at once
					buf[j] = 'X'
				}
			}
			waitGroup(t, &wg)
			if len(errs) > 0 {
				t.Fatalf("%d sends failed, first: %v", len(errs), errs[0])
			}
			got := reassemble(t, b.Messages(topic))
			if len(got) != n {
				t.Fatalf("the topic holds %d messages, want %d", len(got), n)
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("message %d on the topic: %d bytes starting %q; want %d bytes of %q (another record's bytes, or out of order)",
						i, len(got[i]), got[i][:min(8, len(got[i]))], len(want[i]), want[i][:1])
				}
			}
		})
	}
}

// TestCallbacksAfterCloseAreCalled: SendAsync on a closed producer still calls its
// callback, exactly once, with ErrProducerClosed.
func TestCallbacksAfterCloseAreCalled(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	p.Close()
	for _, size := range []int{10, 10 << 20} { // a small message and one that would be chunked
		got := make(chan error, 2)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: make([]byte, size)}, func(_ pulsar.MessageID, err error) { got <- err })
		select {
		case err := <-got:
			if !errors.Is(err, pulsar.ErrProducerClosed) {
				t.Fatalf("%d bytes: callback with %v, want ErrProducerClosed", size, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d bytes: the callback of a SendAsync after Close never ran", size)
		}
		select {
		case err := <-got:
			t.Fatalf("%d bytes: callback ran twice (second: %v)", size, err)
		default:
		}
	}
}

// TestTooLargeMetadataFailsTheMessageNotTheConnection: a property so large that even a
// chunk cannot carry it fails that message with ErrMessageTooLarge at once; nothing
// above the broker's limit is sent, so the connection (and the next message) is fine.
func TestTooLargeMetadataFailsTheMessageNotTheConnection(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	b.SetMaxMessageSize(16 << 10)
	for _, chunking := range []bool{true, false} {
		t.Run(fmt.Sprintf("chunking=%v", chunking), func(t *testing.T) {
			topic := fmt.Sprintf("persistent://public/default/bigprop-%v", chunking)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: topic, DisableChunking: !chunking})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			big := map[string]string{"h": strings.Repeat("v", 20<<10)}
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("small"), Properties: big}); !errors.Is(err, pulsar.ErrMessageTooLarge) {
				t.Fatalf("a message with a 20 KiB property under a 16 KiB limit: %v; want ErrMessageTooLarge", err)
			}
			// A property that fits alone but not with the payload: chunked (or refused
			// without chunking), each chunk sized from the actual metadata.
			mid := map[string]string{"h": strings.Repeat("v", 10<<10)}
			_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: bytes.Repeat([]byte("p"), 12<<10), Properties: mid})
			if chunking && err != nil {
				t.Fatalf("12 KiB with a 10 KiB property: %v; want it chunked", err)
			}
			if !chunking && !errors.Is(err, pulsar.ErrMessageTooLarge) {
				t.Fatalf("12 KiB with a 10 KiB property, chunking off: %v; want ErrMessageTooLarge", err)
			}
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("next")}); err != nil {
				t.Fatalf("the next message: %v", err)
			}
			if s := p.Stats(); s.Reconnects != 0 {
				t.Fatalf("the connection was lost (reconnects %d): a frame above the limit was sent", s.Reconnects)
			}
		})
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("callbacks did not all run within 30 s")
	}
}
