package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

func receiveOne(t *testing.T, cons *pulsar.Consumer) *pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// validationAcks returns the validation error each entry of ledger 5 was acknowledged with.
func validationAcks(b *pulsartest.Broker) map[uint64]pb.CommandAck_ValidationError {
	out := map[uint64]pb.CommandAck_ValidationError{}
	for _, a := range b.Acks(faultTopic) {
		for _, id := range a.IDs {
			if id.GetLedgerId() == 5 {
				v := pb.CommandAck_ValidationError(-1)
				if a.ValidationError != nil {
					v = *a.ValidationError
				}
				out[id.GetEntryId()] = v
			}
		}
	}
	return out
}

func waitAck(t *testing.T, b *pulsartest.Broker, entry uint64) pb.CommandAck_ValidationError {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, ok := validationAcks(b)[entry]; ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry 5:%d was never acknowledged", entry)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func zlibGarbage() pulsartest.Outgoing {
	m := single("not really zlib")
	m.Metadata.Compression = pb.CompressionType_ZLIB.Enum()
	m.Metadata.UncompressedSize = proto.Uint32(100)
	m.Metadata.Properties = []*pb.KeyValue{{Key: proto.String("origin"), Value: proto.String("test")}}
	m.Metadata.PartitionKey = proto.String("k")
	return m
}

// TestUndecodableEntriesAreDeliveredAsStoredWhenAsked: with DeliverUndecodable, an entry
// that does not decode comes to the application as one message saying why, with the
// entry's payload and properties as stored, and is acknowledged only when the
// application acknowledges it (not with a validation error behind its back).
func TestUndecodableEntriesAreDeliveredAsStoredWhenAsked(t *testing.T) {
	badBatch := batchOf("a")
	badBatch.Metadata.NumMessagesInBatch = proto.Int32(3)
	corrupt := single("flipped bits")
	corrupt.Corrupt = true
	cases := []struct {
		name   string
		out    pulsartest.Outgoing
		reason pulsar.UndecodableReason
	}{
		{"zlib that does not decompress", zlibGarbage(), pulsar.ReasonDecompression},
		{"a checksum mismatch", corrupt, pulsar.ReasonChecksumMismatch},
		{"metadata that does not parse", pulsartest.Outgoing{RawMetadata: []byte{0xff, 0xff, 0xff}, Payload: []byte("x")}, pulsar.ReasonBadMetadata},
		{"more batch entries than bytes", badBatch, pulsar.ReasonBadBatch},
		{"a chunk without uuid", chunk("", 0, 2, "xx", 4), pulsar.ReasonBadChunk},
	}
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, DeliverUndecodable: true, AckGroupTime: time.Millisecond})
	var out []pulsartest.Outgoing
	for i, c := range cases {
		c.out.LedgerID, c.out.EntryID = 5, uint64(100+i)
		out = append(out, c.out, single(fmt.Sprint("good-", i)))
	}
	b.Deliver(faultTopic, out...)
	for i, c := range cases {
		m := receiveOne(t, cons)
		if m.Undecodable == nil || m.Undecodable.Reason != c.reason || !errors.Is(m.Undecodable, pulsar.ErrUndecodable) {
			t.Fatalf("%s: delivered with Undecodable %v, want reason %s", c.name, m.Undecodable, c.reason)
		}
		want := append([]byte(nil), c.out.Payload...)
		if c.out.Corrupt {
			want[len(want)-1] ^= 0xff // what the fake broker sent: bytes that fail the checksum
		}
		if !bytes.Equal(m.Payload(), want) || m.Stored == nil {
			t.Fatalf("%s: payload %q (stored %+v), want the entry's %q", c.name, m.Payload(), m.Stored, want)
		}
		if m.ID.LedgerID != 5 || m.ID.EntryID != int64(100+i) || m.Undecodable.ID != m.ID || m.Undecodable.Topic != faultTopic {
			t.Fatalf("%s: id %s, error %v", c.name, m.ID, m.Undecodable)
		}
		if _, acked := validationAcks(b)[uint64(100+i)]; acked {
			t.Fatalf("%s: acknowledged before the application did", c.name)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
		if v := waitAck(t, b, uint64(100+i)); v != -1 {
			t.Fatalf("%s: acknowledged with %v, want a plain acknowledgement", c.name, v)
		}
		if g := receiveOne(t, cons); string(g.Payload()) != fmt.Sprint("good-", i) || g.Undecodable != nil {
			t.Fatalf("after %s: %q (undecodable %v)", c.name, g.Payload(), g.Undecodable)
		}
	}
	s := cons.Stats()
	if s.Malformed != 0 || s.ChecksumFailures != 0 {
		t.Errorf("Stats() counts delivered messages as discarded: %+v", s)
	}
	for _, c := range cases {
		if s.Undecodable[c.reason] != 1 {
			t.Errorf("Stats().Undecodable = %v, want 1 of %s", s.Undecodable, c.reason)
		}
	}
}

// TestUndecodableStoredEntryTellsHowItWasStored: the message of a zlib entry that does
// not decompress keeps its properties and key, and says its codec and sizes.
func TestUndecodableStoredEntryTellsHowItWasStored(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{DeliverUndecodable: true})
	b.Deliver(faultTopic, zlibGarbage())
	m := receiveOne(t, cons)
	if m.Stored == nil || m.Stored.Compression != "ZLIB" || m.Stored.UncompressedSize != 100 || m.Stored.NumMessages != 0 || len(m.Stored.Metadata) == 0 {
		t.Fatalf("stored %+v", m.Stored)
	}
	if m.Properties["origin"] != "test" || m.Key != "k" {
		t.Fatalf("properties %v key %q", m.Properties, m.Key)
	}
	var md pb.MessageMetadata
	if err := proto.Unmarshal(m.Stored.Metadata, &md); err != nil || md.GetCompression() != pb.CompressionType_ZLIB {
		t.Fatalf("the stored metadata %v: %v", &md, err)
	}
}

// TestUndecodableEntriesAreCountedByReasonWhenDiscarded: without DeliverUndecodable the
// entries are acknowledged with their validation error, as before, and counted by reason.
func TestUndecodableEntriesAreCountedByReasonWhenDiscarded(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{})
	corrupt := single("flipped")
	corrupt.Corrupt = true
	b.Deliver(faultTopic, zlibGarbage(), zlibGarbage(), corrupt, single("good"))
	if got := receiveAll(t, cons, 1); got[0] != "good" {
		t.Fatalf("%q", got)
	}
	s := cons.Stats()
	if s.Undecodable[pulsar.ReasonDecompression] != 2 || s.Undecodable[pulsar.ReasonChecksumMismatch] != 1 || len(s.Undecodable) != 2 {
		t.Fatalf("Stats().Undecodable = %v", s.Undecodable)
	}
}

func encrypted(payload string) pulsartest.Outgoing {
	m := single(payload)
	m.Metadata.EncryptionKeys = []*pb.EncryptionKeys{{Key: proto.String("bridge-test"), Value: []byte("wrapped data key")}}
	m.Metadata.EncryptionAlgo = proto.String("")
	m.Metadata.EncryptionParam = []byte("twelve bytes")
	m.Metadata.Compression = pb.CompressionType_LZ4.Enum()
	return m
}

// TestEncryptedMessageStopsThePartitionWithCryptoFail: the default. The messages before
// it are delivered, then Receive says which message is encrypted; it is not
// acknowledged, and nothing after it is delivered.
func TestEncryptedMessageStopsThePartitionWithCryptoFail(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{AckGroupTime: time.Millisecond})
	enc := encrypted("ciphertext")
	enc.LedgerID, enc.EntryID = 5, 7
	b.Deliver(faultTopic, single("before"), enc, single("after"))
	if got := receiveAll(t, cons, 1); got[0] != "before" {
		t.Fatalf("%q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	var ue *pulsar.UndecodableError
	if !errors.As(err, &ue) || ue.Reason != pulsar.ReasonEncrypted || ue.ID.EntryID != 7 || ue.Topic != faultTopic {
		t.Fatalf("Receive: %v, %v; want the encrypted message's error", m, err)
	}
	if got := err.Error(); !bytes.Contains([]byte(got), []byte("5:7")) || !bytes.Contains([]byte(got), []byte(faultTopic)) {
		t.Fatalf("the error %q names neither the message nor its topic", got)
	}
	time.Sleep(50 * time.Millisecond) // acknowledgements are grouped for 1 ms
	if _, acked := validationAcks(b)[7]; acked {
		t.Fatal("the encrypted message was acknowledged")
	}
	if s := cons.Stats(); s.Undecodable[pulsar.ReasonEncrypted] != 1 {
		t.Fatalf("Stats().Undecodable = %v", s.Undecodable)
	}
}

// TestEncryptedMessageIsAcknowledgedWithCryptoDiscard: acknowledged with the
// DecryptionError validation error, counted, and the next message delivered.
func TestEncryptedMessageIsAcknowledgedWithCryptoDiscard(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{CryptoFailureAction: pulsar.CryptoDiscard})
	enc := encrypted("ciphertext")
	enc.LedgerID, enc.EntryID = 5, 7
	b.Deliver(faultTopic, enc, single("after"))
	if got := receiveAll(t, cons, 1); got[0] != "after" {
		t.Fatalf("%q", got)
	}
	if v := waitAck(t, b, 7); v != pb.CommandAck_DecryptionError {
		t.Fatalf("acknowledged with %v", v)
	}
	if s := cons.Stats(); s.Undecodable[pulsar.ReasonEncrypted] != 1 {
		t.Fatalf("Stats().Undecodable = %v", s.Undecodable)
	}
}

// TestEncryptedMessageIsDeliveredAsStoredWithCryptoConsume: the payload as stored (not
// decompressed), and what decrypting it takes: the key names, the parameter, the codec.
func TestEncryptedMessageIsDeliveredAsStoredWithCryptoConsume(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{CryptoFailureAction: pulsar.CryptoConsume})
	enc := encrypted("ciphertext")
	enc.Metadata.NumMessagesInBatch = proto.Int32(3)
	b.Deliver(faultTopic, enc, single("after"))
	m := receiveOne(t, cons)
	if string(m.Payload()) != "ciphertext" || m.Undecodable != nil || m.Stored == nil {
		t.Fatalf("payload %q undecodable %v stored %+v", m.Payload(), m.Undecodable, m.Stored)
	}
	st := m.Stored
	if len(st.EncryptionKeys) != 1 || st.EncryptionKeys[0].Name != "bridge-test" || string(st.EncryptionKeys[0].Value) != "wrapped data key" || string(st.EncryptionParam) != "twelve bytes" || st.Compression != "LZ4" || st.NumMessages != 3 {
		t.Fatalf("stored %+v", st)
	}
	if m.ID.BatchIndex != -1 {
		t.Fatalf("an encrypted batch is delivered as one message; id %s", m.ID)
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, cons, 1); got[0] != "after" {
		t.Fatalf("%q", got)
	}
}

// TestAnUndecodableEntryDeliveredAsStoredIsChargedLikeAnyMessage: its bytes count
// against the MemoryLimiter while queued, and with ReceiverQueueBytes a flood of them
// holds the queue to its bound like any messages.
func TestAnUndecodableEntryDeliveredAsStoredIsChargedLikeAnyMessage(t *testing.T) {
	const size, n, bound = 16 << 10, 40, 64 << 10
	bud := budget.New(1 << 30)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{DeliverUndecodable: true, MemoryLimiter: bud, ReceiverQueueBytes: bound})
	var out []pulsartest.Outgoing
	for range n {
		m := zlibGarbage()
		m.Payload = bytes.Repeat([]byte("z"), size)
		out = append(out, m)
	}
	b.Deliver(faultTopic, out...)
	waitFor(t, "the queue to fill", settled(b, cons, n))
	s := cons.Stats()
	if s.ChargedBytes != cons.Buffered()*size || s.HeldBytes != s.ChargedBytes {
		t.Fatalf("%d queued: charged %d, held %d; want %d each", cons.Buffered(), s.ChargedBytes, s.HeldBytes, cons.Buffered()*size)
	}
	if s.HeldBytes > bound+size {
		t.Fatalf("%d bytes queued, beyond the %d-byte bound and one message", s.HeldBytes, bound)
	}
	for range n {
		m := receiveOne(t, cons)
		if m.Undecodable == nil || m.Size() != size {
			t.Fatalf("undecodable %v size %d", m.Undecodable, m.Size())
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the reservations to go back", func() bool { return cons.Stats().ReservedBytes == 0 })
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes still charged after every message was taken", used)
	}
}

// TestCryptoFailEndsReceiveWhileOtherTopicsStillDeliver: once an encrypted message
// stopped its partition, Receive reports it after what was queued before it, not after
// whatever the consumer's other partitions keep bringing (a busy partitioned topic
// would put the error off for ever).
func TestCryptoFailEndsReceiveWhileOtherTopicsStillDeliver(t *testing.T) {
	const other = "persistent://public/default/other"
	b := fakeBroker(t)
	cons, err := client(t, b.URL()).Subscribe(context.Background(), pulsar.ConsumerOptions{Topics: []string{faultTopic, other}, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	b.Deliver(faultTopic, single("before"), encrypted("ciphertext"))
	if m := receiveOne(t, cons); string(m.Payload()) != "before" {
		t.Fatalf("%q", m.Payload())
	}
	waitFor(t, "the encrypted message", func() bool { return cons.Stats().Undecodable[pulsar.ReasonEncrypted] == 1 })
	b.Deliver(other, single("o1"), single("o2"), single("o3"))
	waitFor(t, "the other topic's messages", func() bool { return cons.Buffered() == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := cons.Receive(ctx); !errors.Is(err, pulsar.ErrUndecodable) {
		t.Fatalf("Receive: %v, %v; want the encrypted message's error before what came after it", m, err)
	}
}
