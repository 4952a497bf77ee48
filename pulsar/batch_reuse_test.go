package pulsar_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestReusedBatchBuffersKeepEveryBatchsBytes: batch buffers are reused once their batch
// is answered, while batches in flight are resent after their connection drops. Every
// message must be stored with its own bytes: a buffer reused while its batch could still
// be resent would put a later batch's bytes in its place, and its messages would be
// missing or wrong.
func TestReusedBatchBuffersKeepEveryBatchsBytes(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	topic := "persistent://public/default/batch-reuse"
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: topic})
	const n, size = 20000, 1024
	payload := func(i uint64) []byte {
		out := bytes.Repeat([]byte{byte(i)}, size)
		binary.BigEndian.PutUint64(out, i)
		return out
	}
	var wg sync.WaitGroup
	wg.Add(n)
	all := make(chan struct{})
	go func() {
		buf := make([]byte, size) // overwritten after every SendAsync, as ingress's read buffer is
		for i := range uint64(n) {
			copy(buf, payload(i))
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: buf}, func(_ pulsar.MessageID, err error) {
				if err != nil {
					t.Errorf("message %d: %v", i, err)
				}
				wg.Done()
			})
			if i == n/4 || i == n/2 || i == 3*n/4 {
				b.DropConnections() // what is in flight is resent on the next connection
			}
		}
		wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-time.After(time.Minute):
		// A frame overwritten in flight is refused or unreadable: its messages stay
		// unanswered, and the window fills.
		t.Fatalf("not every message was answered within a minute: %d of %d stored", len(b.Messages(topic)), n)
	}
	seen := make([]bool, n)
	for _, m := range b.Messages(topic) {
		if m.SequenceID >= n {
			t.Fatalf("a message with sequence id %d; %d were sent", m.SequenceID, n)
		}
		if !bytes.Equal(m.Payload, payload(m.SequenceID)) {
			t.Fatalf("message %d stored with another message's bytes (it begins with %x)", m.SequenceID, m.Payload[:8])
		}
		seen[m.SequenceID] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("message %d was reported sent but not stored", i)
		}
	}
}
