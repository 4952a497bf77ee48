package pulsar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestMessagesLeaveAtOnceWhileTheBrokerKeepsUp: a message sent while fewer than
// BatchingMaxInFlight entries await their receipts is written to the broker at once,
// not held until the entry before it is answered (which cost a record sent one at a
// time another record's round trip); once the window is full, the messages that come
// share one entry, sent when a receipt makes room.
func TestMessagesLeaveAtOnceWhileTheBrokerKeepsUp(t *testing.T) {
	b := fakeBroker(t)
	var mu sync.Mutex
	var entries []int32 // messages per SEND, in order
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandSend {
			md := &pb.MessageMetadata{}
			if err := proto.Unmarshal(c.Metadata, md); err != nil {
				t.Errorf("a SEND's metadata does not decode: %v", err)
			}
			mu.Lock()
			entries = append(entries, max(md.GetNumMessagesInBatch(), 1))
			mu.Unlock()
		}
		return pulsartest.Pass()
	})
	sent := func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int32(nil), entries...)
	}
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxDelay: time.Hour, BatchingMaxInFlight: 3})
	b.HoldReceipts(true)
	errs := make(chan error, 5)
	send := func(s string) {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(s)}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	for _, s := range []string{"0", "1", "2"} {
		send(s)
	}
	waitFor(t, "three messages written to the broker while none is answered", func() bool { return len(sent()) == 3 })
	send("3")
	send("4")
	time.Sleep(50 * time.Millisecond) // the window is full: they must wait
	if got := sent(); len(got) != 3 {
		t.Fatalf("entries written with 3 unanswered and a window of 3: %v; want the last two messages held", got)
	}
	b.HoldReceipts(false)
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := sent(); len(got) != 4 || got[3] != 2 {
		t.Fatalf("entries (messages each): %v; want 1, 1, 1, then the two held messages in one entry", got)
	}
}
