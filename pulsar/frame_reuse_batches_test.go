package pulsar_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestReleasedMessagesOfCompressedAndFilteredBatchesLeaveTheirSiblingsIntact: batches
// compressed by every codec (their messages point into the decompressed buffer, the
// frame adopted all the same), and a batch that comes again with part of it
// acknowledged by the broker's ack set (its frame adopted by the messages delivered
// only): with every message but one released, the one held reads its bytes while more
// frames are read and released, and each buffer goes back once its last holder lets go
// (released frames are poisoned here), so most frames are read into a buffer reused.
// Payloads are random, so that compressed frames
// stay above the pooled size.
func TestReleasedMessagesOfCompressedAndFilteredBatchesLeaveTheirSiblingsIntact(t *testing.T) {
	defer pulsartest.PoisonReleasedFrames(pulsartest.PoisonReleasedFrames(true))
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	const perBatch = 16
	payloads := func() []string {
		ps := make([]string, perBatch)
		for i := range ps {
			p := make([]byte, 1000)
			for j := range p {
				p[j] = byte('a' + rng.IntN(26))
			}
			ps[i] = string(p)
		}
		return ps
	}
	batch := func(kind pb.CompressionType, entry uint64, ackSet []int64, ps []string) pulsartest.Outgoing {
		var buf []byte
		for i, p := range ps {
			smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(p))), SequenceId: proto.Uint64(uint64(i))})
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(smd)))
			buf = append(buf, smd...)
			buf = append(buf, p...)
		}
		size := len(buf)
		out, err := compress.Compress(kind, nil, buf)
		if err != nil {
			t.Fatal(err)
		}
		return pulsartest.Outgoing{LedgerID: 3, EntryID: entry, AckSet: ackSet, Payload: out, Metadata: &pb.MessageMetadata{
			ProducerName: proto.String("p"), SequenceId: proto.Uint64(entry), PublishTime: proto.Uint64(1), Compression: kind.Enum(),
			NumMessagesInBatch: proto.Int32(perBatch), UncompressedSize: proto.Uint32(uint32(size))}}
	}
	// receive takes the n messages of the entry just delivered and checks them against
	// want by batch index.
	receive := func(what string, n int, want []string) []*pulsar.Message {
		t.Helper()
		var got []*pulsar.Message
		for len(got) < n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if string(m.Payload()) != want[m.ID.BatchIndex] {
				t.Fatalf("%s: message %d reads %.16q..., want %.16q...", what, m.ID.BatchIndex, m.Payload(), want[m.ID.BatchIndex])
			}
			got = append(got, m)
		}
		return got
	}
	var held *pulsar.Message // released a round late
	var heldWant string
	entry := uint64(0)
	round := func(what string, kind pb.CompressionType, ackSet []int64, delivered int) {
		t.Helper()
		entry++
		ps := payloads()
		b.Deliver(faultTopic, batch(kind, entry, ackSet, ps))
		got := receive(what, delivered, ps)
		if held != nil {
			if string(held.Payload()) != heldWant {
				t.Fatalf("%s: the message held from the round before reads %.16q..., want %.16q...: its frame was reused while it was held", what, held.Payload(), heldWant)
			}
			held.Release()
		}
		for _, m := range got[:len(got)-1] {
			m.Release()
		}
		held, heldWant = got[len(got)-1], ps[got[len(got)-1].ID.BatchIndex]
	}
	before := pulsar.FrameBuffersMade()
	const rounds = 5
	for r := range rounds {
		for _, kind := range []pb.CompressionType{pb.CompressionType_NONE, pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY} {
			round(fmt.Sprintf("round %d, %s", r, kind), kind, nil, perBatch)
			// The same batch once more (the broker's redelivery of an entry part of which
			// was acknowledged): indexes 0, 5 and 9 to 15 come, the rest are filtered.
			round(fmt.Sprintf("round %d, %s, ack set", r, kind), kind, []int64{1<<0 | 1<<5 | 0x7f<<9}, 9)
		}
	}
	if string(held.Payload()) != heldWant {
		t.Fatalf("the last message held reads %.16q..., want %.16q...", held.Payload(), heldWant)
	}
	held.Release()
	made := pulsar.FrameBuffersMade() - before
	t.Logf("%d frames read into %d fresh buffers", rounds*10, made)
	if !raceEnabled && made > rounds*10/4 {
		// The race detector's pool drops a quarter of what is put back, at random.
		t.Fatalf("%d frames read into %d fresh buffers, want most reused (at most %d fresh): a frame whose messages were all released did not go back", rounds*10, made, rounds*10/4)
	}
}
