package pulsar_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// TestAckSyncAllAnswersEachPartitionOnItsOwn: on a partitioned topic one ACK goes to
// each partition's consumer, all at once, and a partition whose broker refuses fails
// only its own messages.
func TestAckSyncAllAnswersEachPartitionOnItsOwn(t *testing.T) {
	b := fakeBroker(t)
	const topic = "persistent://public/default/receipts"
	b.SetPartitions(topic, 2)
	var mu sync.Mutex
	consumerTopic := map[uint64]string{}
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		switch c.Cmd.GetType() {
		case pulsartest.CommandSubscribe:
			consumerTopic[c.Cmd.GetSubscribe().GetConsumerId()] = c.Cmd.GetSubscribe().GetTopic()
		case pulsartest.CommandAck:
			if strings.HasSuffix(consumerTopic[c.Cmd.GetAck().GetConsumerId()], "-partition-1") {
				return pulsartest.Refuse(pb.ServerError_MetadataError, "partition 1's cursor could not be updated")
			}
		}
		return pulsartest.Pass()
	})
	cons, err := client(t, b.URL()).Subscribe(context.Background(), pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s",
		Type: pulsar.Shared, AckGroupTime: time.Hour, BatchIndexAck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close() })
	b.Deliver(topic+"-partition-0", single("a"), single("b"))
	b.Deliver(topic+"-partition-1", single("c"), single("d"))
	ms := make([]*pulsar.Message, 0, 4)
	for range 4 {
		m, err := cons.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	errs := cons.AckSyncAll(context.Background(), ms)
	for i, m := range ms {
		refused := strings.HasSuffix(m.Topic, "-partition-1")
		if refused != (errs[i] != nil) {
			t.Fatalf("message %s of %s: %v", m.ID, m.Topic, errs[i])
		}
	}
	if a0, a1 := b.Acks(topic+"-partition-0"), b.Acks(topic+"-partition-1"); len(a0) != 1 || len(a0[0].IDs) != 2 || len(a1) != 0 {
		t.Fatalf("acks: partition 0 %v, partition 1 %v; want one ACK of 2 ids on partition 0 (partition 1's refused)", a0, a1)
	}
}
