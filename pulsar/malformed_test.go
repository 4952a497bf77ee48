package pulsar_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestHostileMetadataIsDiscardedAndTheConsumerGoesOn: whatever a producer writes in a
// message's metadata, the consumer (and the connection's reader under it) survives:
// the message is acknowledged with the validation error the official clients use,
// counted as malformed, and the next message is delivered. Before delivery.Parse, a
// batch of -1 messages panicked the reader (makeslice) and killed the process.
func TestHostileMetadataIsDiscardedAndTheConsumerGoesOn(t *testing.T) {
	withBatch := func(n int32, mutate func(*pulsartest.Outgoing)) pulsartest.Outgoing {
		m := batchOf("a")
		m.Metadata.NumMessagesInBatch = proto.Int32(n)
		if mutate != nil {
			mutate(&m)
		}
		return m
	}
	batchWithSize := func(size int32) pulsartest.Outgoing {
		m := batchOf("a")
		smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(size)})
		m.Payload = append(append([]byte{0, 0, 0, byte(len(smd))}, smd...), 'a')
		return m
	}
	compressed := func(kind pb.CompressionType, size uint32) pulsartest.Outgoing {
		m := single("not really compressed")
		m.Metadata.Compression = kind.Enum()
		m.Metadata.UncompressedSize = proto.Uint32(size)
		return m
	}
	chunkWith := func(mutate func(*pb.MessageMetadata)) pulsartest.Outgoing {
		m := chunk("u", 0, 2, "xx", 4)
		mutate(m.Metadata)
		return m
	}
	bad := pb.CommandAck_BatchDeSerializeError
	size := pb.CommandAck_UncompressedSizeCorruption
	cases := []struct {
		name string
		out  pulsartest.Outgoing
		want pb.CommandAck_ValidationError
	}{
		{"batch of -1", withBatch(-1, nil), bad},
		{"batch of 0", withBatch(0, nil), bad},
		{"batch of 2^30 in a few bytes", withBatch(1<<30, nil), bad},
		{"batch of max int32", withBatch(1<<31-1, nil), bad},
		{"more batch entries than bytes", withBatch(3, nil), bad},
		{"ack_set longer than the batch", withBatch(1, func(m *pulsartest.Outgoing) { m.AckSet = []int64{1, 1, 1} }), bad},
		{"negative payload_size", batchWithSize(-5), bad},
		{"payload_size beyond the batch", batchWithSize(1 << 30), bad},
		{"metadata that does not parse", pulsartest.Outgoing{Metadata: &pb.MessageMetadata{}, RawMetadata: []byte{0xff, 0xff, 0xff}, Payload: []byte("x")}, pb.CommandAck_ChecksumMismatch},
		{"lz4 announcing 4 GiB", compressed(pb.CompressionType_LZ4, 1<<32-1), size},
		{"zstd announcing more than the consumer's limit", compressed(pb.CompressionType_ZSTD, 256<<20+1), size},
		{"zstd announcing more than it can expand to", compressed(pb.CompressionType_ZSTD, 6<<20), pb.CommandAck_DecompressionError},
		{"zlib that does not decompress", compressed(pb.CompressionType_ZLIB, 100), pb.CommandAck_DecompressionError},
		{"unknown compression", compressed(pb.CompressionType(77), 100), pb.CommandAck_DecompressionError},
		{"chunk id -1", chunkWith(func(md *pb.MessageMetadata) { md.ChunkId = proto.Int32(-1) }), bad},
		{"chunk id past the count", chunkWith(func(md *pb.MessageMetadata) { md.ChunkId = proto.Int32(2) }), bad},
		{"chunk without uuid", chunkWith(func(md *pb.MessageMetadata) { md.Uuid = nil }), bad},
		{"chunk that is a batch", chunkWith(func(md *pb.MessageMetadata) { md.NumMessagesInBatch = proto.Int32(-1) }), bad},
		{"negative total_chunk_msg_size", chunkWith(func(md *pb.MessageMetadata) { md.TotalChunkMsgSize = proto.Int32(-1) }), size},
		{"total_chunk_msg_size above the limit", chunkWith(func(md *pb.MessageMetadata) { md.TotalChunkMsgSize = proto.Int32(1<<31 - 1) }), size},
		{"chunk larger than its message", chunk("u", 0, 2, "xxx", 2), size},
		{"compressed chunked message announcing 4 GiB", chunkWith(func(md *pb.MessageMetadata) {
			md.Compression = pb.CompressionType_LZ4.Enum()
			md.UncompressedSize = proto.Uint32(1<<32 - 1)
		}), size},
	}
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10})
	var out []pulsartest.Outgoing
	for i, c := range cases {
		c.out.LedgerID, c.out.EntryID = 5, uint64(100+i)
		out = append(out, c.out, single(fmt.Sprint("good-", i)))
	}
	b.Deliver(faultTopic, out...)
	got := receiveAll(t, cons, len(cases))
	for i, p := range got {
		if want := fmt.Sprint("good-", i); p != want {
			t.Fatalf("message %d is %q, want %q (after %q)", i, p, want, cases[i].name)
		}
	}
	nothingMore(t, cons)
	if s := cons.Stats(); s.Malformed != len(cases) {
		t.Errorf("Stats().Malformed = %d, want %d", s.Malformed, len(cases))
	}
	// Each one is acknowledged with its validation error, so the broker drops it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		reasons := map[uint64]pb.CommandAck_ValidationError{}
		for _, a := range b.Acks(faultTopic) {
			if a.ValidationError != nil && len(a.IDs) == 1 && a.IDs[0].GetLedgerId() == 5 {
				reasons[a.IDs[0].GetEntryId()] = *a.ValidationError
			}
		}
		missing := ""
		for i, c := range cases {
			if r, ok := reasons[uint64(100+i)]; !ok || r != c.want {
				missing += fmt.Sprintf("\n  %s: got %v (acknowledged: %v), want %v", c.name, r, ok, c.want)
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("validation acknowledgements:%s", missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
