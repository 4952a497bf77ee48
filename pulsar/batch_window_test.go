package pulsar_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// windowProbe is a producer on a fake broker that holds its receipts, and the entries
// (messages per SEND) written to it in order.
type windowProbe struct {
	t    *testing.T
	b    *pulsartest.Broker
	p    *pulsar.Producer
	mu   sync.Mutex
	sent []int32
	errs chan error
}

func newWindowProbe(t *testing.T, opts pulsar.ProducerOptions) *windowProbe {
	w := &windowProbe{t: t, b: fakeBroker(t), errs: make(chan error, 100)}
	w.b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandSend {
			md := &pb.MessageMetadata{}
			if err := proto.Unmarshal(c.Metadata, md); err != nil {
				t.Errorf("a SEND's metadata does not decode: %v", err)
			}
			w.mu.Lock()
			w.sent = append(w.sent, max(md.GetNumMessagesInBatch(), 1))
			w.mu.Unlock()
		}
		return pulsartest.Pass()
	})
	opts.BatchingMaxDelay = time.Hour
	w.p = producer(t, client(t, w.b.URL()), opts)
	w.b.HoldReceipts(true)
	return w
}

func (w *windowProbe) entries() []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sent)
}

func (w *windowProbe) send(n int) {
	for range n {
		w.p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m")}, func(_ pulsar.MessageID, err error) { w.errs <- err })
	}
}

// written waits for n entries written, then checks that no further one comes.
func (w *windowProbe) written(n int, why string) {
	w.t.Helper()
	waitFor(w.t, fmt.Sprintf("%d entries written: %s", n, why), func() bool { return len(w.entries()) >= n })
	time.Sleep(50 * time.Millisecond)
	if got := w.entries(); len(got) != n {
		w.t.Fatalf("entries written (messages each): %v; want %d: %s", got, n, why)
	}
}

func (w *windowProbe) wait(n int) {
	w.t.Helper()
	for range n {
		if err := <-w.errs; err != nil {
			w.t.Fatal(err)
		}
	}
}

// TestMessagesLeaveAtOnceWhileTheBrokerKeepsUp: a message sent while fewer than
// BatchingMaxInFlight entries await their receipts is written to the broker at once,
// not held until the entry before it is answered (which cost a record sent one at a
// time another record's round trip); while the entries in flight carry one message
// each, the window stretches to four times as many; once that is full, the messages
// that come share one entry, sent when a receipt makes room.
func TestMessagesLeaveAtOnceWhileTheBrokerKeepsUp(t *testing.T) {
	w := newWindowProbe(t, pulsar.ProducerOptions{BatchingMaxInFlight: 3})
	w.send(12)
	w.written(12, "twelve lone messages, none answered, a window of 3 stretched four times")
	w.send(2)
	w.written(12, "the stretched window is full: the next two wait")
	w.b.HoldReceipts(false)
	w.wait(14)
	if got := w.entries(); len(got) != 13 || got[12] != 2 {
		t.Fatalf("entries (messages each): %v; want twelve of one, then the two held messages in one entry", got)
	}
}

// TestTheWindowStretchesOnlyWhileItsEntriesAreSmall: beyond BatchingMaxInFlight entries,
// a batch leaves at once only while the messages in flight (and in it) are no more than
// the stretched window: records that come faster than the broker answers fill entries of
// many, and then share entries instead of each taking one of its own (which cost
// throughput at saturation).
func TestTheWindowStretchesOnlyWhileItsEntriesAreSmall(t *testing.T) {
	w := newWindowProbe(t, pulsar.ProducerOptions{BatchingMaxInFlight: 2, BatchingMaxMessages: 4})
	w.send(8)
	w.written(8, "eight lone messages: a window of 2 stretched to 8")
	w.send(4)
	w.written(9, "four more fill a batch (BatchingMaxMessages), which leaves whatever the window")
	w.b.ReleaseReceipts(2) // in flight: 7 entries, 10 messages
	w.send(1)
	w.written(9, "7 entries in flight carry 10 messages, more than the stretched window of 8")
	w.b.ReleaseReceipts(2) // in flight: 5 entries, 8 messages: with the one waiting, 9
	w.written(9, "5 entries in flight carry 8 messages: with the one waiting, 9")
	w.b.ReleaseReceipts(1) // in flight: 4 entries, 7 messages
	w.written(10, "4 entries in flight carry 7 messages: the waiting one leaves")
	w.b.HoldReceipts(false)
	w.wait(13)
}

// TestAWindowOfOneWritesNothingBehindAnUnansweredEntry: the stretch applies to windows
// above one only; a window of one keeps its promise that nothing is written behind an
// entry in flight (so a refused entry is resent before anything after it).
func TestAWindowOfOneWritesNothingBehindAnUnansweredEntry(t *testing.T) {
	w := newWindowProbe(t, pulsar.ProducerOptions{BatchingMaxInFlight: 1})
	w.send(1)
	w.written(1, "a lone message leaves at once")
	w.send(3)
	w.written(1, "a window of one with its entry unanswered")
	w.b.HoldReceipts(false)
	w.wait(4)
	if got := w.entries(); !slices.Equal(got, []int32{1, 3}) {
		t.Fatalf("entries (messages each): %v; want 1, then the three held in one", got)
	}
}
