package pulsar_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestAckSyncAllReturnsOnlyOnceTheBrokerConfirmed: the acknowledgements of several
// messages, two of one batch among them, leave as one ACK with a request id, and
// AckSyncAll returns when the broker's ACK_RESPONSE comes, not before: held back, it
// waits (here until its deadline); refused, each message's outcome is the broker's error.
func TestAckSyncAllReturnsOnlyOnceTheBrokerConfirmed(t *testing.T) {
	b := fakeBroker(t)
	var hold atomic.Int32 // 0: pass, 1: ignore ACKs, 2: refuse them
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() != pulsartest.CommandAck {
			return pulsartest.Pass()
		}
		switch hold.Load() {
		case 1:
			return pulsartest.Ignore()
		case 2:
			return pulsartest.Refuse(pb.ServerError_MetadataError, "the cursor could not be updated")
		}
		return pulsartest.Pass()
	})
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, AckGroupTime: time.Hour, BatchIndexAck: true})
	b.Deliver(faultTopic, single("1"), batchOf("x", "y", "z"), single("2"), single("3"))
	ctx := context.Background()
	var ms []*pulsar.Message
	for range 6 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}

	hold.Store(1)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	errs := cons.AckSyncAll(short, ms[:1])
	cancel()
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("an acknowledgement the broker never answered: %v, want it to wait for the answer until the deadline", errs[0])
	}

	hold.Store(2)
	errs = cons.AckSyncAll(ctx, ms[4:5])
	var se *pulsar.ServerError
	if !errors.As(errs[0], &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_MetadataError) {
		t.Fatalf("an acknowledgement the broker refused: %v, want its error", errs[0])
	}

	hold.Store(0)
	before := len(b.Acks(faultTopic))
	errs = cons.AckSyncAll(ctx, []*pulsar.Message{ms[0], ms[1], ms[2], ms[5]})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	acks := b.Acks(faultTopic)[before:]
	if len(acks) != 1 || len(acks[0].IDs) != 3 {
		t.Fatalf("acks %v: want one ACK naming 3 entries (the batch once, with both indexes)", acks)
	}
	for _, id := range acks[0].IDs {
		if int64(id.GetEntryId()) == ms[1].ID.EntryID && (len(id.GetAckSet()) != 1 || id.GetAckSet()[0] != 0b100) {
			t.Fatalf("the batch's ack set %b, want only index 2 left (0b100)", id.GetAckSet())
		}
	}
}
