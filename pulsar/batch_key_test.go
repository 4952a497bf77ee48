package pulsar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// A batch of messages with different keys carries its first message's key and ordering
// key on the entry, as the Java client's batch container writes it (a Key_Shared
// subscription dispatches an entry by the entry's key), while each message keeps its own
// key, or none, in its single metadata.
func TestAMixedKeyBatchCarriesItsFirstMessagesKeyAsTheJavaClientWritesIt(t *testing.T) {
	b := fakeBroker(t)
	var mu sync.Mutex
	var entries []*pb.MessageMetadata
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandSend {
			md := &pb.MessageMetadata{}
			if err := proto.Unmarshal(c.Metadata, md); err != nil {
				t.Errorf("a SEND's metadata does not decode: %v", err)
			}
			mu.Lock()
			entries = append(entries, md)
			mu.Unlock()
		}
		return pulsartest.Pass()
	})
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxMessages: 3, BatchingMaxDelay: time.Hour, BatchingMaxInFlight: 1})
	// The first message leaves alone (nothing is in flight); the receipts held, the
	// window of one is full and the next three wait for each other in one batch.
	b.HoldReceipts(true)
	msgs := []*pulsar.ProducerMessage{
		{Payload: []byte("0"), Key: "first"},
		{Payload: []byte("1"), Key: "a", OrderingKey: []byte("oa")},
		{Payload: []byte("2"), Key: "b"},
		{Payload: []byte("3")},
	}
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	b.HoldReceipts(false)
	for range msgs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(entries) != 2 || entries[1].GetNumMessagesInBatch() != 3 {
		for _, e := range entries {
			t.Logf("entry: %d messages, key %q", e.GetNumMessagesInBatch(), e.GetPartitionKey())
		}
		t.Fatalf("%d entries; want the first message, then one batch of 3", len(entries))
	}
	if md := entries[1]; md.GetPartitionKey() != "a" || string(md.GetOrderingKey()) != "oa" {
		t.Errorf("the entry carries key %q, ordering key %q; want the first message's, a and oa", md.GetPartitionKey(), md.GetOrderingKey())
	}
	stored := b.Messages("persistent://public/default/fault")
	if len(stored) != 4 || stored[1].Key != "a" || stored[2].Key != "b" || stored[3].Key != "" {
		t.Fatalf("the messages' own keys: %+v; want first, a, b and none", stored)
	}
}
