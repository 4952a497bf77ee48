package delivery

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

var testLimits = Limits{MaxMessageSize: 1 << 20, MaxChunkedMessageSize: 4 << 20}

func batch(payloads ...string) []byte {
	var buf []byte
	for i, p := range payloads {
		smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(p))), SequenceId: proto.Uint64(uint64(i)),
			CompactedOut: proto.Bool(p == "compacted")})
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(smd)))
		buf = append(buf, smd...)
		buf = append(buf, p...)
	}
	return buf
}

func marshal(md *pb.MessageMetadata) []byte {
	b, _ := proto.Marshal(md)
	return b
}

func TestParseValid(t *testing.T) {
	zstd, _ := compress.Compress(pb.CompressionType_ZSTD, nil, batch("a", "bb", "compacted", "d"))
	for _, tc := range []struct {
		name    string
		md      *pb.MessageMetadata
		payload []byte
		ackSet  []int64
		kind    Kind
		want    []string
		permits int
		skipped int
	}{
		{"single", &pb.MessageMetadata{}, []byte("hello"), nil, Single, []string{"hello"}, 1, 0},
		{"batch", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2)}, batch("a", "bb"), nil, Batch, []string{"a", "bb"}, 2, 0},
		{"compressed batch, compacted and acknowledged indexes", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(4), Compression: pb.CompressionType_ZSTD.Enum(),
			UncompressedSize: proto.Uint32(uint32(len(batch("a", "bb", "compacted", "d"))))}, zstd, []int64{0b0101}, Batch, []string{"a"}, 4, 3},
		{"chunk", &pb.MessageMetadata{Uuid: proto.String("u"), NumChunksFromMsg: proto.Int32(2), ChunkId: proto.Int32(1), TotalChunkMsgSize: proto.Int32(4)},
			[]byte("cd"), nil, Chunk, []string{"cd"}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse(marshal(tc.md), tc.payload, tc.ackSet, testLimits)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			if e.Kind == Batch {
				for _, m := range e.Messages {
					got = append(got, string(m.Payload))
				}
			} else {
				got = []string{string(e.Payload)}
			}
			if e.Kind != tc.kind || e.Permits != tc.permits || e.Skipped != tc.skipped || len(got) != len(tc.want) {
				t.Fatalf("kind %d permits %d skipped %d payloads %q; want %d %d %d %q", e.Kind, e.Permits, e.Skipped, got, tc.kind, tc.permits, tc.skipped, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("payloads %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// TestMalformedPermitsAreWhatTheBrokerCharged: a discarded entry returns the permits its
// count claims (what the broker charged for it), at least one.
func TestMalformedPermitsAreWhatTheBrokerCharged(t *testing.T) {
	for n, want := range map[int32]int{-1: 1, 0: 1, 1 << 30: 1 << 30} {
		e, err := Parse(marshal(&pb.MessageMetadata{NumMessagesInBatch: proto.Int32(n)}), []byte("abc"), nil, testLimits)
		var de *Error
		if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) || de.Reason != pb.CommandAck_BatchDeSerializeError {
			t.Fatalf("batch of %d: %v", n, err)
		}
		if e.Permits != want {
			t.Fatalf("batch of %d: %d permits, want %d", n, e.Permits, want)
		}
	}
}

// FuzzParse: no input panics, allocates beyond the limits or yields an entry that
// contradicts its metadata.
func FuzzParse(f *testing.F) {
	lz4, _ := compress.Compress(pb.CompressionType_LZ4, nil, batch("x", "yy"))
	f.Add(marshal(&pb.MessageMetadata{}), []byte("hello"), []byte{})
	f.Add(marshal(&pb.MessageMetadata{NumMessagesInBatch: proto.Int32(3)}), batch("a", "compacted", "c"), []byte{5})
	f.Add(marshal(&pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2), Compression: pb.CompressionType_LZ4.Enum(),
		UncompressedSize: proto.Uint32(uint32(len(batch("x", "yy"))))}), lz4, []byte{})
	f.Add(marshal(&pb.MessageMetadata{Uuid: proto.String("u"), NumChunksFromMsg: proto.Int32(3), ChunkId: proto.Int32(0), TotalChunkMsgSize: proto.Int32(9)}), []byte("abc"), []byte{})
	f.Add(marshal(&pb.MessageMetadata{NumMessagesInBatch: proto.Int32(-1)}), batch("a"), []byte{})
	f.Fuzz(func(t *testing.T, metadata, payload, ack []byte) {
		var ackSet []int64
		for len(ack) >= 8 {
			ackSet = append(ackSet, int64(binary.LittleEndian.Uint64(ack)))
			ack = ack[8:]
		}
		if len(ack) > 0 {
			ackSet = append(ackSet, int64(ack[0]))
		}
		e, err := Parse(metadata, payload, ackSet, testLimits)
		if e.Permits < 1 {
			t.Fatalf("%d permits", e.Permits)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("an error that is not ErrMalformed: %v", err)
			}
			if md := e.Metadata; md != nil && md.NumMessagesInBatch != nil && e.Permits != max(1, int(md.GetNumMessagesInBatch())) {
				t.Fatalf("a malformed batch of %d costs %d permits", md.GetNumMessagesInBatch(), e.Permits)
			}
			return
		}
		md := e.Metadata
		switch e.Kind {
		case Single:
			if md.GetCompression() != pb.CompressionType_NONE && len(e.Payload) != int(md.GetUncompressedSize()) {
				t.Fatalf("%d bytes, metadata says %d", len(e.Payload), md.GetUncompressedSize())
			}
			if len(payload) > testLimits.MaxMessageSize || len(e.Payload) > max(testLimits.MaxChunkedMessageSize, len(payload)) {
				t.Fatalf("%d bytes from a %d-byte payload", len(e.Payload), len(payload))
			}
		case Batch:
			if e.BatchSize != int(md.GetNumMessagesInBatch()) || len(e.Messages)+e.Skipped != e.BatchSize || e.Permits != e.BatchSize {
				t.Fatalf("batch of %d: %d messages, %d skipped, %d permits", md.GetNumMessagesInBatch(), len(e.Messages), e.Skipped, e.Permits)
			}
			last := -1
			for _, m := range e.Messages {
				if m.Index <= last || m.Index >= e.BatchSize || int(m.Metadata.PayloadSize) != len(m.Payload) {
					t.Fatalf("batch message %d after %d: %d bytes, metadata says %d", m.Index, last, len(m.Payload), m.Metadata.PayloadSize)
				}
				last = m.Index
			}
		case Chunk:
			c := e.Chunk
			if c.ID < 0 || c.ID >= c.Count || c.Count < 2 || c.TotalSize > testLimits.MaxChunkedMessageSize || len(e.Payload) > c.TotalSize || !bytes.Equal(e.Payload, payload) {
				t.Fatalf("chunk %+v of %d bytes", c, len(e.Payload))
			}
		case Encrypted:
			if len(md.GetEncryptionKeys()) == 0 || !bytes.Equal(e.Payload, payload) {
				t.Fatalf("an encrypted entry of %d keys and %d of %d bytes", len(md.GetEncryptionKeys()), len(e.Payload), len(payload))
			}
		default:
			t.Fatalf("kind %d", e.Kind)
		}
	})
}

// TestParseDecompressesBeyondTheBrokerLimit: the broker's limit bounds an entry as stored,
// compressed; a valid compressed message or batch decompresses to what it announces up to
// the consumer's own limit, as the Java client reads it. Bounded by the broker's limit,
// such a message (a 7 000 000-byte ZSTD message of the Java producer, stored in 3 MB) was
// acknowledged as corrupt (UncompressedSizeCorruption) and lost. Above the consumer's
// limit, beyond the codec's expansion bound or with a payload above the broker's limit,
// it is still malformed, before anything is allocated.
func TestParseDecompressesBeyondTheBrokerLimit(t *testing.T) {
	lim := Limits{MaxMessageSize: 16 << 10, MaxChunkedMessageSize: 1 << 20}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB: four times the broker's limit
	bigBatch := batch(string(big[:40<<10]), string(big[:30<<10]))
	compressed := func(kind pb.CompressionType, b []byte) []byte {
		out, err := compress.Compress(kind, nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > lim.MaxMessageSize {
			t.Fatalf("%s compressed %d bytes to %d, above the broker's limit %d: the test proves nothing", kind, len(b), len(out), lim.MaxMessageSize)
		}
		return out
	}
	for _, kind := range []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY} {
		t.Run(kind.String(), func(t *testing.T) {
			md := &pb.MessageMetadata{Compression: kind.Enum(), UncompressedSize: proto.Uint32(uint32(len(big)))}
			e, err := Parse(marshal(md), compressed(kind, big), nil, lim)
			if err != nil || e.Kind != Single || !bytes.Equal(e.Payload, big) {
				t.Fatalf("a %d-byte message: kind %d, %d bytes, %v", len(big), e.Kind, len(e.Payload), err)
			}
			md = &pb.MessageMetadata{Compression: kind.Enum(), UncompressedSize: proto.Uint32(uint32(len(bigBatch))), NumMessagesInBatch: proto.Int32(2)}
			e, err = Parse(marshal(md), compressed(kind, bigBatch), nil, lim)
			if err != nil || e.Kind != Batch || len(e.Messages) != 2 || !bytes.Equal(e.Messages[0].Payload, big[:40<<10]) || !bytes.Equal(e.Messages[1].Payload, big[:30<<10]) {
				t.Fatalf("a %d-byte batch: kind %d, %d messages, %v", len(bigBatch), e.Kind, len(e.Messages), err)
			}
		})
	}
	zstd := compressed(pb.CompressionType_ZSTD, big)
	for _, tc := range []struct {
		name    string
		md      *pb.MessageMetadata
		payload []byte
		want    pb.CommandAck_ValidationError
	}{
		{"uncompressed size above the consumer's limit", &pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(),
			UncompressedSize: proto.Uint32(uint32(lim.MaxChunkedMessageSize + 1))}, zstd, pb.CommandAck_UncompressedSizeCorruption},
		{"compressed payload above the broker's limit", &pb.MessageMetadata{Compression: pb.CompressionType_NONE.Enum()},
			make([]byte, lim.MaxMessageSize+1), pb.CommandAck_UncompressedSizeCorruption},
		{"a size the payload cannot expand to", &pb.MessageMetadata{Compression: pb.CompressionType_LZ4.Enum(),
			UncompressedSize: proto.Uint32(uint32(lim.MaxChunkedMessageSize))}, []byte("tiny"), pb.CommandAck_DecompressionError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(marshal(tc.md), tc.payload, nil, lim)
			var de *Error
			if !errors.As(err, &de) || de.Reason != tc.want {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestACompressedBatchHoldsNoMoreMessagesThanTheBrokerLimitAllows: a batch's messages cost
// the consumer far more than their bytes (each is parsed metadata and a message, a few
// hundred bytes, charged to no budget for an empty payload), so their number is bounded
// by what the broker's limit allows an entry (one per 4 bytes), as it was while the
// decompressed batch was: else a few kilobytes of ZSTD announcing 256 MiB of six-byte
// messages made the connection's reader parse 44 million of them (8 million cost 1.7 GB
// in Parse alone). A batch above the limit once decompressed, with as many messages as
// the limit allows, is still delivered.
func TestACompressedBatchHoldsNoMoreMessagesThanTheBrokerLimitAllows(t *testing.T) {
	lim := Limits{MaxMessageSize: 16 << 10, MaxChunkedMessageSize: 1 << 20}
	entries := func(n int) []byte {
		b := make([]byte, 0, 6*n)
		for range n {
			b = append(b, 0, 0, 0, 2, 0x18, 0) // metadata {payload_size: 0}, empty payload
		}
		return b
	}
	parse := func(n int) (Entry, error) {
		raw := entries(n)
		z, err := compress.Compress(pb.CompressionType_ZSTD, nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		md := &pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(uint32(len(raw))),
			NumMessagesInBatch: proto.Int32(int32(n))}
		return Parse(marshal(md), z, nil, lim)
	}
	most := lim.MaxMessageSize / batchEntryMin
	if e, err := parse(most); err != nil || e.Kind != Batch || len(e.Messages) != most {
		t.Fatalf("a batch of %d messages, %d bytes decompressed: kind %d, %d messages, %v", most, 6*most, e.Kind, len(e.Messages), err)
	}
	_, err := parse(most + 1)
	var de *Error
	if !errors.As(err, &de) || de.Reason != pb.CommandAck_BatchDeSerializeError {
		t.Fatalf("a batch of %d messages: %v, want BatchDeSerializeError", most+1, err)
	}
}

// TestParseAsksBeforeDecompressingBeyondTheBrokerLimit: an entry that decompresses to
// more than the broker's limit is decompressed only once Admit allows its size; refused,
// it is Deferred as stored with its permits, so the consumer can park it and decompress
// it once its budget has room. Entries within the limit are never asked about, and
// DeferAll defers any entry whose metadata parses.
func TestParseAsksBeforeDecompressingBeyondTheBrokerLimit(t *testing.T) {
	lim := Limits{MaxMessageSize: 16 << 10, MaxChunkedMessageSize: 1 << 20}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	bigBatch := batch(string(big[:40<<10]), string(big[:30<<10]))
	zstd := func(b []byte) []byte {
		out, err := compress.Compress(pb.CompressionType_ZSTD, nil, b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var asked []int
	refuse, admit := lim, lim
	refuse.Admit = func(n int) bool { asked = append(asked, n); return false }
	admit.Admit = func(n int) bool { asked = append(asked, n); return true }

	md := marshal(&pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(uint32(len(bigBatch))), NumMessagesInBatch: proto.Int32(2)})
	e, err := Parse(md, zstd(bigBatch), nil, refuse)
	if err != nil || e.Kind != Deferred || e.Permits != 2 || len(asked) != 1 || asked[0] != len(bigBatch) {
		t.Fatalf("refused: kind %d, %d permits, asked %v, %v; want Deferred, 2 permits, asked for %d", e.Kind, e.Permits, asked, err, len(bigBatch))
	}
	e, err = Parse(md, zstd(bigBatch), nil, admit)
	if err != nil || e.Kind != Batch || len(e.Messages) != 2 || !bytes.Equal(e.Messages[1].Payload, big[:30<<10]) {
		t.Fatalf("admitted: kind %d, %d messages, %v", e.Kind, len(e.Messages), err)
	}

	asked = nil
	small := []byte("within the broker's limit")
	md = marshal(&pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(uint32(len(small)))})
	if e, err := Parse(md, zstd(small), nil, refuse); err != nil || e.Kind != Single || !bytes.Equal(e.Payload, small) || len(asked) != 0 {
		t.Fatalf("within the limit: kind %d, %q, asked %v, %v; want it decompressed without asking", e.Kind, e.Payload, asked, err)
	}
	all := lim
	all.DeferAll = true
	if e, err := Parse(md, zstd(small), nil, all); err != nil || e.Kind != Deferred || e.Permits != 1 {
		t.Fatalf("DeferAll: kind %d, %d permits, %v; want Deferred", e.Kind, e.Permits, err)
	}
	// A size the payload cannot expand to is refused without asking (nobody waits for
	// room for it); what only decompression finds is an error once admitted.
	asked = nil
	md = marshal(&pb.MessageMetadata{Compression: pb.CompressionType_LZ4.Enum(), UncompressedSize: proto.Uint32(uint32(lim.MaxChunkedMessageSize))})
	var de *Error
	if _, err := Parse(md, []byte("tiny"), nil, refuse); !errors.As(err, &de) || de.Reason != pb.CommandAck_DecompressionError || len(asked) != 0 {
		t.Fatalf("a size 4 bytes cannot expand to: %v, asked %v; want DecompressionError without asking", err, asked)
	}
	garbage := zstd(big)
	garbage = append(garbage[:len(garbage)-8:len(garbage)-8], make([]byte, 8)...)
	md = marshal(&pb.MessageMetadata{Compression: pb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(uint32(len(big)))})
	if e, _ := Parse(md, garbage, nil, refuse); e.Kind != Deferred {
		t.Fatalf("refused: kind %d, want Deferred", e.Kind)
	}
	if _, err := Parse(md, garbage, nil, admit); !errors.As(err, &de) || de.Reason != pb.CommandAck_DecompressionError {
		t.Fatalf("admitted: %v, want DecompressionError", err)
	}
}
