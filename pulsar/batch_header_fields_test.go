package pulsar_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// sentEntry is one SEND as the broker read it.
type sentEntry struct {
	send *pb.CommandSend
	md   *pb.MessageMetadata
	raw  []byte
}

// TestABatchsHeaderCarriesOnlyItsOwnFields: the producer frames every batch from one
// reused header. Messages of every kind (keys, ordering keys, properties, event times;
// chunked messages too large for an entry, framed from metadata of their own) come in
// entries of one to many, shaped by receipts held and released; every batch's metadata
// and SEND command must carry what its own messages give it, as the Java client's
// batch container writes it (the first message's key and ordering key, its first and
// highest sequence ids, its count, its uncompressed size) and nothing from the entry
// before it: no event time, property, chunk field or highest sequence id of another.
func TestABatchsHeaderCarriesOnlyItsOwnFields(t *testing.T) {
	b := fakeBroker(t)
	b.SetMaxMessageSize(16 << 10)
	var mu sync.Mutex
	var entries []sentEntry
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandSend {
			md := &pb.MessageMetadata{}
			if err := proto.Unmarshal(c.Metadata, md); err != nil {
				t.Errorf("a SEND's metadata does not decode: %v", err)
			}
			mu.Lock()
			entries = append(entries, sentEntry{send: proto.Clone(c.Cmd.GetSend()).(*pb.CommandSend), md: md, raw: append([]byte(nil), c.Payload...)})
			mu.Unlock()
		}
		return pulsartest.Pass()
	})
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxMessages: 7, BatchingMaxDelay: time.Hour, BatchingMaxInFlight: 2})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 400
	errs := make(chan error, n)
	for i := range n {
		m := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i))}
		if rng.IntN(2) == 0 {
			m.Key = fmt.Sprintf("k%d", i)
		}
		if rng.IntN(3) == 0 {
			m.OrderingKey = []byte(fmt.Sprintf("o%d", i))
		}
		if rng.IntN(3) == 0 {
			m.Properties = map[string]string{"p": fmt.Sprint(i)}
		}
		if rng.IntN(3) == 0 {
			m.EventTime = time.UnixMilli(int64(1_000_000 + i))
		}
		if rng.IntN(25) == 0 {
			m.Payload = make([]byte, 40<<10) // chunked: its own metadata, between batches
		}
		switch rng.IntN(6) {
		case 0:
			b.HoldReceipts(true)
		case 1:
			b.HoldReceipts(false)
		}
		p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	b.HoldReceipts(false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	batches, sizes := 0, map[int]int{}
	for i, e := range entries {
		md := e.md
		if md.NumMessagesInBatch == nil {
			if md.NumChunksFromMsg == nil {
				t.Errorf("entry %d: neither a batch nor a chunk", i)
			}
			continue
		}
		batches++
		singles := decodeSingles(t, e.raw)
		k := len(singles)
		sizes[min(k, 3)]++
		want := &pb.MessageMetadata{ProducerName: md.ProducerName, PublishTime: md.PublishTime,
			SequenceId: proto.Uint64(singles[0].GetSequenceId()), NumMessagesInBatch: proto.Int32(int32(k)),
			UncompressedSize: proto.Uint32(uint32(len(e.raw)))}
		if k > 1 {
			want.HighestSequenceId = proto.Uint64(singles[k-1].GetSequenceId())
		}
		if singles[0].PartitionKey != nil {
			want.PartitionKey = singles[0].PartitionKey
		}
		if len(singles[0].OrderingKey) > 0 {
			want.OrderingKey = singles[0].OrderingKey
		}
		if !proto.Equal(md, want) {
			t.Errorf("entry %d (a batch of %d): metadata\n%v\nwant\n%v", i, k, md, want)
		}
		wantSend := &pb.CommandSend{ProducerId: e.send.ProducerId, SequenceId: want.SequenceId, NumMessages: proto.Int32(int32(k)),
			HighestSequenceId: want.HighestSequenceId}
		if !proto.Equal(e.send, wantSend) {
			t.Errorf("entry %d (a batch of %d): SEND\n%v\nwant\n%v", i, k, e.send, wantSend)
		}
	}
	t.Logf("%d entries, %d batches: of 1, 2 and more messages %v", len(entries), batches, sizes)
	if sizes[1] == 0 || sizes[3] == 0 || batches == len(entries) {
		t.Fatalf("batches of 1, 2, 3+ messages: %v, of %d entries: the test did not mix lone, batched and chunked entries", sizes, len(entries))
	}
}

// decodeSingles returns a batch payload's single-message metadata.
func decodeSingles(t *testing.T, payload []byte) []*pb.SingleMessageMetadata {
	t.Helper()
	var out []*pb.SingleMessageMetadata
	for len(payload) > 0 {
		if len(payload) < 4 {
			t.Fatalf("a batch's payload ends inside a length")
		}
		n := binary.BigEndian.Uint32(payload)
		smd := &pb.SingleMessageMetadata{}
		if err := proto.Unmarshal(payload[4:4+n], smd); err != nil {
			t.Fatal(err)
		}
		payload = payload[4+int(n)+int(smd.GetPayloadSize()):]
		out = append(out, smd)
	}
	return out
}
