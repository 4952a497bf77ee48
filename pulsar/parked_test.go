package pulsar_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// largeBody is n bytes that compress to almost nothing, told apart by seed.
func largeBody(seed, n int) []byte {
	b := bytes.Repeat([]byte("recordio"), n/8)
	binary.BigEndian.PutUint64(b, uint64(seed))
	binary.BigEndian.PutUint64(b[len(b)-8:], uint64(seed))
	return b
}

// TestLargeCompressedEntriesWaitForTheBudget: entries that decompress beyond the
// broker's limit are decompressed only as the MemoryLimiter has room for them. The
// shape that found it: a 4 MiB budget, a 1 MiB ReceiverQueueBytes window whose small
// messages, taken, let 128 permits go out at once, then a backlog of ZSTD entries of a
// few kilobytes that decompress to 8 MiB each (and a batch of three 3 MiB messages, and
// small messages between them). Decompressed on the connection's reader as they came,
// every permit in flight brought 8 MiB charged beyond the budget: the consumer held the
// whole backlog, 16 times the budget here and without bound with more permits. Now an
// entry beyond the broker's limit waits, as stored, until the budget has room for it
// (alone, when it is larger than the whole budget), and the entries after it wait
// behind it: what the consumer holds stays within the budget and one entry, and every
// message is still delivered byte-exact and in order as the application takes them.
func TestLargeCompressedEntriesWaitForTheBudget(t *testing.T) {
	const (
		budgetBytes = 4 << 20
		large       = 8 << 20
		n           = 16
	)
	b := fakeBroker(t)
	bud := budget.New(budgetBytes)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud})

	var small []string
	for i := range 20 {
		small = append(small, fmt.Sprintf("small %d", i))
		b.Deliver(faultTopic, single(small[i]))
	}
	if got := receiveAll(t, cons, len(small)); fmt.Sprint(got) != fmt.Sprint(small) {
		t.Fatalf("small messages: %q", got)
	}

	var want [][]byte
	var entries []pulsartest.Outgoing
	for i := range n {
		body := largeBody(i, large)
		entries = append(entries, compressedOutgoing(t, pb.CompressionType_ZSTD, body, 0))
		want = append(want, body)
		if i == n/2 {
			var buf []byte
			for j := range 3 {
				p := largeBody(100+j, 3<<20)
				smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(p))), SequenceId: proto.Uint64(uint64(j))})
				buf = binary.BigEndian.AppendUint32(buf, uint32(len(smd)))
				buf = append(append(buf, smd...), p...)
				want = append(want, p)
			}
			entries = append(entries, compressedOutgoing(t, pb.CompressionType_ZSTD, buf, 3))
		}
		if i%4 == 1 {
			s := fmt.Sprintf("between %d", i)
			entries = append(entries, single(s))
			want = append(want, []byte(s))
		}
	}
	b.Deliver(faultTopic, entries...)

	// Every entry has arrived (the window has room for them all, as stored): queued
	// for the application, or parked.
	waitFor(t, "the backlog to arrive", func() bool { return cons.Buffered()+cons.Stats().Parked >= len(entries) })
	time.Sleep(200 * time.Millisecond) // room for more to be decompressed, if it would be
	if s := bud.Stats(); s.Peak > budgetBytes+large {
		t.Fatalf("the consumer held %d bytes of the budget at most (now %d; %d queued, %d parked): want at most the %d-byte budget and one %d-byte entry",
			s.Peak, s.Used, cons.Buffered(), cons.Stats().Parked, budgetBytes, large)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, w := range want {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d of %d: %v (stats %+v)", i, len(want), err, cons.Stats())
		}
		if !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %d: %d bytes starting %q, want the %d bytes starting %q (byte-exact, in order)", i, len(m.Payload()), head(m.Payload()), len(w), head(w))
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
	if s := bud.Stats(); s.Peak > budgetBytes+large {
		t.Fatalf("the consumer held %d bytes of the budget at most: want at most %d", s.Peak, budgetBytes+large)
	}
	t.Logf("%d messages delivered byte-exact and in order; the budget's peak was %d bytes", len(want), bud.Stats().Peak)
	if s := cons.Stats(); s.Parked != 0 || s.Malformed != 0 {
		t.Fatalf("after the backlog: %d parked, %d malformed, want none", s.Parked, s.Malformed)
	}
}

func head(b []byte) []byte { return b[:min(len(b), 12)] }

// TestParkedEntriesAreDroppedWithTheirRegistration: entries parked until the budget has
// room are dropped when the registration they came on is lost, like the queued messages
// (the broker delivers them again on the next one), and the one waiting for room stops
// waiting; delivered again, they come in order. An entry that fails only once
// decompressed (a corrupt ZSTD frame announcing 8 MiB) is acknowledged with
// DecompressionError when its turn comes, and the partition goes on.
func TestParkedEntriesAreDroppedWithTheirRegistration(t *testing.T) {
	const (
		budgetBytes = 4 << 20
		large       = 8 << 20
	)
	b := fakeBroker(t)
	bud := budget.New(budgetBytes)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud})
	b.Deliver(faultTopic, single("first"))
	receiveAll(t, cons, 1)

	body0, body1 := largeBody(0, large), largeBody(1, large)
	corrupt := compressedOutgoing(t, pb.CompressionType_ZSTD, largeBody(2, large), 0)
	corrupt.Payload = append(corrupt.Payload[:len(corrupt.Payload)-8:len(corrupt.Payload)-8], make([]byte, 8)...)
	corrupt.LedgerID, corrupt.EntryID = 9, 1
	entries := []pulsartest.Outgoing{compressedOutgoing(t, pb.CompressionType_ZSTD, body0, 0), corrupt,
		compressedOutgoing(t, pb.CompressionType_ZSTD, body1, 0), single("last")}
	b.Deliver(faultTopic, entries...)
	waitFor(t, "the entries to arrive", func() bool { return cons.Buffered()+cons.Stats().Parked == len(entries) })
	if cons.Stats().Parked == 0 {
		t.Fatalf("nothing parked with a %d-byte budget and %d-byte entries untaken: the test proves nothing", budgetBytes, large)
	}

	b.CloseConsumers()
	waitFor(t, "the registration's queue and parked entries to be dropped", func() bool {
		s := cons.Stats()
		return s.Reconnects == 1 && s.Parked == 0 && cons.Buffered() == 0
	})
	// What is left is the new registration's reservation for its permits in flight.
	waitFor(t, "the budget to hold nothing but the new registration's reservation", func() bool {
		return bud.Stats().Used == int64(cons.Stats().ReservedBytes)
	})

	b.Deliver(faultTopic, entries...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, w := range [][]byte{body0, body1, []byte("last")} {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v (stats %+v)", i, err, cons.Stats())
		}
		if !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %d: %d bytes starting %q, want %d starting %q", i, len(m.Payload()), head(m.Payload()), len(w), head(w))
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
	waitFor(t, "the corrupt entry's DecompressionError acknowledgement", func() bool {
		for _, a := range b.Acks(faultTopic) {
			if a.ValidationError != nil && *a.ValidationError == pb.CommandAck_DecompressionError && len(a.IDs) == 1 && a.IDs[0].GetLedgerId() == 9 {
				return true
			}
		}
		return false
	})
	if s := bud.Stats(); s.Peak > budgetBytes+large {
		t.Fatalf("budget peak %d, want at most %d", s.Peak, budgetBytes+large)
	}
}

// TestAnEntryLargerThanTheBudgetIsNotStarvedByOtherUsers: an entry that decompresses to
// more than the whole budget is taken, beyond it, by a partition holding nothing else of
// it, as a chunked message being reassembled is; it does not wait for the whole process
// to hold nothing, which other streams' records and messages may never allow.
func TestAnEntryLargerThanTheBudgetIsNotStarvedByOtherUsers(t *testing.T) {
	const large = 8 << 20
	b := fakeBroker(t)
	bud := budget.New(4 << 20)
	if !bud.TryAcquire(1 << 20) { // another stream's, held throughout
		t.Fatal("the budget is empty")
	}
	defer bud.Release(1 << 20)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud, KeepMemoryCharge: true})
	body := largeBody(7, large)
	b.Deliver(faultTopic, compressedOutgoing(t, pb.CompressionType_ZSTD, body, 0), single("after"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, w := range [][]byte{body, []byte("after")} {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v (stats %+v, budget %+v)", i, err, cons.Stats(), bud.Stats())
		}
		if !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %d: %d bytes, want %d", i, len(m.Payload()), len(w))
		}
		if m.MemoryCharge() != int64(len(w)) {
			t.Fatalf("message %d of %d bytes was charged %d, want its decompressed size", i, len(w), m.MemoryCharge())
		}
		cons.Settled(m)
	}
}

// TestRedeliveringEverythingDropsTheParkedEntries: RedeliverUnacknowledged drops the
// parked entries with the queued messages (the broker sends them all again, and their
// permits return with the queued messages'); delivered again, they come in order, once
// each.
func TestRedeliveringEverythingDropsTheParkedEntries(t *testing.T) {
	const large = 8 << 20
	b := fakeBroker(t)
	bud := budget.New(4 << 20)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 4, ReceiverQueueBytes: 1 << 20,
		MemoryLimiter: bud})
	b.Deliver(faultTopic, single("first"))
	receiveAll(t, cons, 1)
	var want [][]byte
	var entries []pulsartest.Outgoing
	for i := range 3 {
		want = append(want, largeBody(i, large))
		entries = append(entries, compressedOutgoing(t, pb.CompressionType_ZSTD, want[i], 0))
	}
	b.Deliver(faultTopic, entries...)
	// The window's four permits: one went to a message taken, three brought the
	// entries; the first is queued, the two after it parked.
	waitFor(t, "two entries parked", func() bool { return cons.Buffered() == 1 && cons.Stats().Parked == 2 })
	cons.RedeliverUnacknowledged()
	if s := cons.Stats(); s.Parked != 0 || cons.Buffered() != 0 {
		t.Fatalf("after RedeliverUnacknowledged: %d parked, %d queued, want none", s.Parked, cons.Buffered())
	}
	b.Deliver(faultTopic, entries...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, w := range want {
		m, err := cons.Receive(ctx)
		if err != nil {
			_, avail := b.Permits(faultTopic)
			t.Fatalf("message %d: %v (%d permits available on the broker, stats %+v)", i, err, avail, cons.Stats())
		}
		if !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %d: %d bytes starting %q, want %d starting %q", i, len(m.Payload()), head(m.Payload()), len(w), head(w))
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
}
