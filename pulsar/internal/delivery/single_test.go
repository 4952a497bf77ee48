package delivery

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// FuzzReadSingleMetadata holds readSingleMetadata to proto.Unmarshal: the same inputs
// refused, the same fields read from the others.
func FuzzReadSingleMetadata(f *testing.F) {
	full := marshalSingle(&pb.SingleMessageMetadata{
		Properties:   []*pb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}},
		PartitionKey: proto.String("key"), PayloadSize: proto.Int32(1024), CompactedOut: proto.Bool(true),
		EventTime: proto.Uint64(1700000000000), PartitionKeyB64Encoded: proto.Bool(true), OrderingKey: []byte("ord"),
		SequenceId: proto.Uint64(7), NullValue: proto.Bool(true), NullPartitionKey: proto.Bool(true)})
	f.Add(full)
	f.Add(marshalSingle(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(-1), OrderingKey: []byte{}}))
	f.Add([]byte{})
	f.Add(protowire.AppendTag(nil, smdPayloadSize, protowire.BytesType))                    // a known field with another wire type
	f.Add(append(protowire.AppendTag(nil, 99, protowire.StartGroupType), 0x0c))             // an unknown group, closed by another
	f.Add(protowire.AppendTag(nil, 3, protowire.EndGroupType))                              // an end of group never opened
	f.Add(append(protowire.AppendTag(nil, smdProperties, protowire.BytesType), 2, 0x12, 0)) // a property without its key
	f.Fuzz(func(t *testing.T, b []byte) {
		var got SingleMetadata
		err := readSingleMetadata(b, &got)
		want := &pb.SingleMessageMetadata{}
		werr := proto.Unmarshal(b, want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("% x: read %v, proto.Unmarshal %v", b, err, werr)
		}
		if err != nil {
			return
		}
		if got.PartitionKey != want.GetPartitionKey() || got.PayloadSize != want.GetPayloadSize() || got.CompactedOut != want.GetCompactedOut() ||
			got.EventTime != want.GetEventTime() || got.PartitionKeyB64Encoded != want.GetPartitionKeyB64Encoded() ||
			!bytes.Equal(got.OrderingKey, want.GetOrderingKey()) || (got.OrderingKey == nil) != (want.OrderingKey == nil) ||
			got.SequenceID != want.GetSequenceId() || got.NullValue != want.GetNullValue() || got.NullPartitionKey != want.GetNullPartitionKey() ||
			len(got.Properties) != len(want.GetProperties()) {
			t.Fatalf("% x: read %+v, proto.Unmarshal %v", b, got, want)
		}
		for i, kv := range want.GetProperties() {
			if !proto.Equal(kv, got.Properties[i]) {
				t.Fatalf("% x: property %d read %v, proto.Unmarshal %v", b, i, got.Properties[i], kv)
			}
		}
	})
}

func marshalSingle(smd *pb.SingleMessageMetadata) []byte {
	b, err := proto.Marshal(smd)
	if err != nil {
		panic(err)
	}
	return b
}

// TestABatchAllocatesNothingPerMessageBeyondItsFields: splitting a batch whose messages
// carry what the official clients batch (a payload size and a sequence id) allocates the
// slice of its messages once, nothing per message; proto.Unmarshal made three
// allocations per message.
func TestABatchAllocatesNothingPerMessageBeyondItsFields(t *testing.T) {
	const n = 100
	var payload []byte
	for i := range n {
		smd := marshalSingle(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(3), SequenceId: proto.Uint64(uint64(i))})
		payload = protowire.AppendFixed32(payload, 0)
		payload[len(payload)-4], payload[len(payload)-3], payload[len(payload)-2], payload[len(payload)-1] = 0, 0, 0, byte(len(smd))
		payload = append(append(payload, smd...), "abc"...)
	}
	md := &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(n)}
	lim := Limits{MaxMessageSize: 5 << 20, MaxChunkedMessageSize: 5 << 20}
	var e Entry
	allocs := testing.AllocsPerRun(20, func() {
		e = Entry{}
		if err := parseBatch(&e, md, payload, nil, lim); err != nil {
			t.Fatal(err)
		}
	})
	if len(e.Messages) != n || e.Messages[n-1].Metadata.SequenceID != n-1 || string(e.Messages[0].Payload) != "abc" {
		t.Fatalf("split into %d messages, the last %+v", len(e.Messages), e.Messages[len(e.Messages)-1])
	}
	if allocs > 1 {
		t.Fatalf("splitting a batch of %d made %.0f allocations, want 1 (its messages' slice)", n, allocs)
	}
}
