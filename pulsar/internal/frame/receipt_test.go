package frame

import (
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// The fast SEND_RECEIPT decoder gives what proto.Unmarshal gives, or leaves the bytes to
// it: for every input either it declines, or proto.Unmarshal accepts the same bytes
// and the two messages are equal (proto.Equal), defaults and absent fields included.
func FuzzDecodeSendReceipt(f *testing.F) {
	for _, c := range receiptSeeds() {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSendReceipt(t, b)
	})
}

// The fast decoder takes the receipts brokers send (every combination of present and
// absent fields, random values, negative int32s) and agrees with proto.Unmarshal on
// every one, in one allocation; what it declines (unknown, repeated or other fields) is
// decoded by proto.Unmarshal through Decode, with the same error for what it refuses.
func TestSendReceiptsAreDecodedAsProtoUnmarshalDecodesThem(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	taken := 0
	for i := range 4000 {
		b := marshalCmd(t, randomReceipt(rng, i))
		if checkSendReceipt(t, b) {
			taken++
		}
	}
	if taken < 3000 {
		t.Fatalf("the fast decoder took %d of 4000 receipts as brokers send them, want nearly all", taken)
	}
	for _, b := range receiptSeeds() {
		checkSendReceipt(t, b)
	}
	plain := marshalCmd(t, &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: proto.Uint64(3), SequenceId: proto.Uint64(99), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(12), EntryId: proto.Uint64(345)}}})
	if n := testing.AllocsPerRun(100, func() { decodeSendReceipt(plain) }); n != 1 {
		t.Fatalf("a receipt decoded in %v allocations, want 1", n)
	}
	// Bytes that do not parse fail Decode with ErrCorrupt, as before.
	for _, bad := range [][]byte{
		{0x08, 0x07, 0x3a, 0x05, 0x08},       // the receipt's length runs past the end
		{0x08},                               // a tag without its value
		{0x08, 0x07, 0x3a, 0x02, 0x08, 0xff}, // a truncated varint inside the receipt
	} {
		body := append([]byte{0, 0, 0, byte(len(bad))}, bad...)
		var fr Frame
		if err := Decode(body, &fr); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("% x: %v, want ErrCorrupt", bad, err)
		}
	}
}

// checkSendReceipt compares the fast decoder with proto.Unmarshal on b and says whether
// the fast decoder took it.
func checkSendReceipt(t *testing.T, b []byte) bool {
	t.Helper()
	want := &pb.BaseCommand{}
	werr := proto.Unmarshal(b, want)
	got, ok := decodeSendReceipt(b)
	if ok {
		if werr != nil {
			t.Fatalf("% x: decoded %v, proto.Unmarshal refuses it: %v", b, got, werr)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("% x: decoded %v, proto.Unmarshal %v", b, got, want)
		}
		if got.GetSendReceipt().GetMessageId().GetPartition() != want.GetSendReceipt().GetMessageId().GetPartition() ||
			got.GetSendReceipt().GetMessageId().GetBatchIndex() != want.GetSendReceipt().GetMessageId().GetBatchIndex() {
			t.Fatalf("% x: defaults differ: decoded %v, proto.Unmarshal %v", b, got, want)
		}
	}
	// Through Decode: the same command, or the same refusal.
	body := append(make([]byte, 4, 4+len(b)), b...)
	body[0], body[1], body[2], body[3] = byte(len(b)>>24), byte(len(b)>>16), byte(len(b)>>8), byte(len(b))
	var fr Frame
	err := Decode(body, &fr)
	if (err == nil) != (werr == nil) {
		t.Fatalf("% x: Decode %v, proto.Unmarshal %v", b, err, werr)
	}
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("% x: Decode %v, want ErrCorrupt", b, err)
		}
	} else if !proto.Equal(fr.Cmd, want) {
		t.Fatalf("% x: Decode %v, proto.Unmarshal %v", b, fr.Cmd, want)
	}
	return ok
}

func randomReceipt(rng *rand.Rand, i int) *pb.BaseCommand {
	u := func() *uint64 {
		if rng.IntN(5) == 0 {
			return nil
		}
		v := rng.Uint64() >> rng.IntN(64)
		return &v
	}
	s := func() *int32 {
		if rng.IntN(4) == 0 {
			return nil
		}
		v := int32(rng.Uint32()>>rng.IntN(32)) - int32(rng.IntN(3)) // negative ones too
		return &v
	}
	r := &pb.CommandSendReceipt{ProducerId: u(), SequenceId: u(), HighestSequenceId: u()}
	if i%7 != 0 {
		r.MessageId = &pb.MessageIdData{LedgerId: u(), EntryId: u(), Partition: s(), BatchIndex: s(), BatchSize: s()}
		if i%50 == 1 || i%50 == 2 {
			r.MessageId.AckSet = []int64{rng.Int64(), -1}[:1+i%2]
		}
		if i%60 == 3 {
			r.MessageId.FirstChunkMessageId = &pb.MessageIdData{LedgerId: u(), EntryId: u()}
		}
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: r}
}

func receiptSeeds() [][]byte {
	full := &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1 << 40), HighestSequenceId: proto.Uint64(7),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(10), EntryId: proto.Uint64(20), Partition: proto.Int32(-1),
			BatchIndex: proto.Int32(-1), BatchSize: proto.Int32(128)}}}
	b, _ := proto.Marshal(full)
	var seeds [][]byte
	seeds = append(seeds, b, []byte{})
	empty, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{}})
	seeds = append(seeds, empty)
	onlyType, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum()})
	seeds = append(seeds, onlyType)
	other, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	seeds = append(seeds, other)
	// An unknown field in each message, a field twice, a known field with another wire type.
	seeds = append(seeds, protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), b...), 99, protowire.VarintType), 5))
	seeds = append(seeds, append(append([]byte(nil), b...), b...))
	seeds = append(seeds, protowire.AppendBytes(protowire.AppendTag(nil, baseType, protowire.BytesType), []byte{7}))
	inner, _ := proto.Marshal(full.GetSendReceipt())
	withUnknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), inner...), 42, protowire.VarintType), 1)
	seeds = append(seeds, protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, baseType, protowire.VarintType), 7), baseSendReceipt, protowire.BytesType), withUnknown))
	// An id field as bytes, and an int32 written as a 5-byte varint.
	id := protowire.AppendBytes(protowire.AppendTag(nil, idPartition, protowire.BytesType), []byte{1})
	rc := protowire.AppendBytes(protowire.AppendTag(nil, receiptMessageID, protowire.BytesType), id)
	seeds = append(seeds, protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, baseType, protowire.VarintType), 7), baseSendReceipt, protowire.BytesType), rc))
	id = protowire.AppendVarint(protowire.AppendTag(nil, idBatchSize, protowire.VarintType), 0xffffffff)
	rc = protowire.AppendBytes(protowire.AppendTag(nil, receiptMessageID, protowire.BytesType), id)
	seeds = append(seeds, protowire.AppendBytes(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, baseType, protowire.VarintType), 7), baseSendReceipt, protowire.BytesType), rc))
	return seeds
}

func marshalCmd(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
