package pulsar_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestAChunkedMessageThatDoesNotDecompressIsDeliveredWhenAsked: with DeliverUndecodable
// (every egress stream with a dead-letter topic) a compressed chunked message whose
// reassembled payload does not decompress is handed up as stored, as a single entry is,
// instead of being acknowledged behind the application's back; acknowledging it
// acknowledges every chunk, without a validation error.
func TestAChunkedMessageThatDoesNotDecompressIsDeliveredWhenAsked(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, DeliverUndecodable: true,
		AckGroupTime: time.Millisecond})
	c0, c1 := chunk("z", 0, 2, "not re", 13), chunk("z", 1, 2, "al zlib", 13)
	for _, c := range []*pb.MessageMetadata{c0.Metadata, c1.Metadata} {
		c.Compression = pb.CompressionType_ZLIB.Enum()
		c.UncompressedSize = proto.Uint32(100)
	}
	c0.LedgerID, c0.EntryID, c1.LedgerID, c1.EntryID = 5, 200, 5, 201
	b.Deliver(faultTopic, c0, c1, single("next"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Undecodable == nil {
		waitAck(t, b, 200)
		for _, a := range b.Acks(faultTopic) {
			t.Logf("ack %v %v", a.IDs, a.ValidationError)
		}
		t.Fatalf("got %q (undecodable nil): the chunked message was acknowledged behind the application's back", m.Payload())
	}
	if got := string(m.Payload()); got != "not real zlib" || m.Undecodable.Reason != pulsar.ReasonDecompression || m.Stored == nil || m.Stored.Compression != "ZLIB" {
		t.Fatalf("payload %q, reason %v, stored %+v: want the chunks' bytes as stored, a decompression error, ZLIB", got, m.Undecodable.Reason, m.Stored)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	waitAck(t, b, 200)
	waitAck(t, b, 201)
	for _, a := range b.Acks(faultTopic) {
		if a.ValidationError != nil {
			t.Fatalf("ack %v with validation error %v: the application settled it", a.IDs, a.ValidationError)
		}
	}
	if next, err := cons.Receive(ctx); err != nil || string(next.Payload()) != "next" {
		t.Fatalf("the next message: %v %v", next, err)
	}
}
