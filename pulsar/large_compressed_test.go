package pulsar_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// compressible is n seeded bytes, mostly from a two-letter alphabet: ZSTD and ZLIB store
// them in about a fifth of their size.
func compressible(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		if r.IntN(64) == 0 {
			b[i] = byte(r.IntN(256))
		} else {
			b[i] = 'a' + byte(r.IntN(2))
		}
	}
	return b
}

// compressedOutgoing is payload compressed with kind, as a producer stores it; batch > 0
// marks it a batch of that many messages.
func compressedOutgoing(t *testing.T, kind pb.CompressionType, payload []byte, batch int) pulsartest.Outgoing {
	t.Helper()
	out, err := compress.Compress(kind, nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1),
		Compression: kind.Enum(), UncompressedSize: proto.Uint32(uint32(len(payload)))}
	if batch > 0 {
		md.NumMessagesInBatch = proto.Int32(int32(batch))
	}
	return pulsartest.Outgoing{Metadata: md, Payload: out}
}

// TestCompressedMessageLargerThanTheBrokerLimitIsDelivered: the broker's maxMessageSize
// bounds a message as stored, compressed; the Java producer checks it against the
// compressed size, and the Java consumer decompresses it to whatever it announces. A
// compressed message and a compressed batch four times the broker's limit once
// decompressed are delivered whole, charged to the MemoryLimiter at their decompressed
// size as a reassembled chunked message is. The bound against decompression bombs is the
// consumer's MaxChunkedMessageSize (and each codec's expansion bound), not the broker's
// frame limit: a message announcing more is still acknowledged as corrupt, and so is a
// payload above the broker's limit (the Java client's check). Bounded by the broker's
// limit, the message and the batch were acknowledged with UncompressedSizeCorruption and
// lost.
func TestCompressedMessageLargerThanTheBrokerLimitIsDelivered(t *testing.T) {
	const (
		brokerLimit = 64 << 10
		ownLimit    = 1 << 20
	)
	big := compressible(1, 4*brokerLimit)
	var batchPayloads [][]byte
	var batchBuf []byte
	for i := range 3 {
		p := compressible(uint64(10+i), 80<<10)
		batchPayloads = append(batchPayloads, p)
		smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(p))), SequenceId: proto.Uint64(uint64(i))})
		batchBuf = binary.BigEndian.AppendUint32(batchBuf, uint32(len(smd)))
		batchBuf = append(append(batchBuf, smd...), p...)
	}
	one := compressedOutgoing(t, pb.CompressionType_ZSTD, big, 0)
	batched := compressedOutgoing(t, pb.CompressionType_ZLIB, batchBuf, 3)
	bomb := compressedOutgoing(t, pb.CompressionType_ZSTD, make([]byte, 2*ownLimit), 0)
	tooLarge := pulsartest.Outgoing{Metadata: &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(1)}, Payload: make([]byte, brokerLimit+1)}
	for _, o := range []pulsartest.Outgoing{one, batched, bomb} {
		if len(o.Payload) > brokerLimit {
			t.Fatalf("a %d-byte compressed payload is above the broker's limit %d: the test proves nothing", len(o.Payload), brokerLimit)
		}
		if n := int(o.Metadata.GetUncompressedSize()); n < 3*brokerLimit {
			t.Fatalf("%d bytes decompressed: the test wants more than three times the broker's limit %d", n, brokerLimit)
		}
	}
	bomb.LedgerID, bomb.EntryID = 7, 1
	tooLarge.LedgerID, tooLarge.EntryID = 7, 2

	b := fakeBroker(t)
	b.SetMaxMessageSize(brokerLimit)
	bud := budget.New(4 << 20)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MaxChunkedMessageSize: ownLimit,
		MemoryLimiter: bud, KeepMemoryCharge: true})
	b.Deliver(faultTopic, one, batched, bomb, tooLarge, single("marker"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := append([][]byte{big}, batchPayloads...)
	want = append(want, []byte("marker"))
	for i, w := range want {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d of %d: %v (stats %+v)", i, len(want), err, cons.Stats())
		}
		if !bytes.Equal(m.Payload(), w) {
			t.Fatalf("message %d: %d bytes, want the %d sent (byte-exact)", i, len(m.Payload()), len(w))
		}
		if m.MemoryCharge() != int64(len(w)) {
			t.Fatalf("message %d of %d bytes was charged %d to the MemoryLimiter, want its decompressed size", i, len(w), m.MemoryCharge())
		}
		cons.Settled(m)
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
	if s := cons.Stats(); s.Malformed != 2 {
		t.Fatalf("Stats().Malformed = %d, want 2 (the one above the consumer's limit, the one above the broker's)", s.Malformed)
	}
	waitFor(t, "the two corrupt entries' validation acknowledgements", func() bool {
		got := map[uint64]pb.CommandAck_ValidationError{}
		for _, a := range b.Acks(faultTopic) {
			if a.ValidationError != nil && len(a.IDs) == 1 && a.IDs[0].GetLedgerId() == 7 {
				got[a.IDs[0].GetEntryId()] = *a.ValidationError
			}
		}
		return len(got) == 2 && got[1] == pb.CommandAck_UncompressedSizeCorruption && got[2] == pb.CommandAck_UncompressedSizeCorruption
	})
}
