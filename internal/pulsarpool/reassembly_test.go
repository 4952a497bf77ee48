package pulsarpool

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/telemetry"
)

// TestSubscriberMemoryCountsChunksBeingReassembled: the chunks of a message a consumer is
// reassembling are charged to the budget; Memory must say they are the consumers' (the
// metrics' consumer_queues), not leave them to the rest the metrics call ingress.
// Before, a half-reassembled 5 MiB message showed as 5 MiB of records awaiting receipts.
func TestSubscriberMemoryCountsChunksBeingReassembled(t *testing.T) {
	const part = 16 << 10
	b := fakeBroker(t)
	bud := budget.New(1 << 20)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-reassembly"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 10, ReceiverQueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// MessageMetadata of chunk id of 3 (the fields' numbers: pulsar's PulsarApi.proto).
	chunk := func(id int) pulsartest.Outgoing {
		var md []byte
		md = protowire.AppendTag(md, 1, protowire.BytesType)
		md = protowire.AppendString(md, "p")
		for _, f := range []struct {
			num protowire.Number
			v   uint64
		}{{2, 0}, {3, 1}, {9, 3 * part}, {27, 3}, {28, 3 * part}, {29, uint64(id)}} {
			md = protowire.AppendTag(md, f.num, protowire.VarintType)
			md = protowire.AppendVarint(md, f.v)
		}
		md = protowire.AppendTag(md, 26, protowire.BytesType)
		md = protowire.AppendString(md, "u")
		return pulsartest.Outgoing{RawMetadata: md, Payload: []byte(strings.Repeat("c", part))}
	}
	b.Deliver(topic, chunk(0), chunk(1))
	b.DeliverPayloads(topic, []byte("marker"))
	d, err := sub.Receive(ctx) // the chunks came before it on the same connection
	if err != nil || string(d.Payload) != "marker" {
		t.Fatalf("got %v, %v; want the marker", d, err)
	}
	_ = sub.Ack(d)
	deadline := time.Now().Add(wait)
	for {
		q, r, dl := s.Memory()
		used := bud.Stats().Used
		if used == q+r+dl && q >= 2*part {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("two %d-byte chunks held for reassembly: budget %d bytes, Memory says %d queued, %d reserved, %d delivered (the rest, %d, counted as ingress)",
				part, used, q, r, dl, used-q-r-dl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close with a message half reassembled", used)
	}
}

// TestSubscriberBoundsChunkedMessagesPending: streams[].maxPendingChunkedMessages reaches
// the consumer; a chunked message pushed out by a newer one is dropped, its chunk
// acknowledged, and counted (bridge_egress_discarded_total{reason="chunked_incomplete"}),
// also once the consumer closed.
func TestSubscriberBoundsChunkedMessagesPending(t *testing.T) {
	b := fakeBroker(t)
	s := NewSubscriber(newClient(t, b.URL()), budget.New(1<<20))
	const topic = "persistent://public/default/sub-pending-chunks"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 10, ReceiverQueueBytes: 1 << 20, MaxPendingChunkedMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The first chunk (of 2) of message uuid (the fields' numbers: pulsar's PulsarApi.proto).
	first := func(uuid string) pulsartest.Outgoing {
		var md []byte
		md = protowire.AppendTag(md, 1, protowire.BytesType)
		md = protowire.AppendString(md, "p")
		for _, f := range []struct {
			num protowire.Number
			v   uint64
		}{{2, 0}, {3, 1}, {9, 2}, {27, 2}, {28, 2}, {29, 0}} {
			md = protowire.AppendTag(md, f.num, protowire.VarintType)
			md = protowire.AppendVarint(md, f.v)
		}
		md = protowire.AppendTag(md, 26, protowire.BytesType)
		md = protowire.AppendString(md, uuid)
		return pulsartest.Outgoing{RawMetadata: md, Payload: []byte("c")}
	}
	b.Deliver(topic, first("a"), first("b")) // "a" is pushed out by "b"
	b.DeliverPayloads(topic, []byte("marker"))
	d, err := sub.Receive(ctx)
	if err != nil || string(d.Payload) != "marker" {
		t.Fatalf("got %v, %v; want the marker", d, err)
	}
	_ = sub.Ack(d)
	var st telemetry.PulsarStats
	s.AddStats(&st)
	if st.ChunkedDropped != 1 {
		t.Fatalf("stats %+v: want 1 chunked message dropped", st)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var after telemetry.PulsarStats
	s.AddStats(&after)
	if after.ChunkedDropped != 1 {
		t.Fatalf("after close, stats %+v: want 1 chunked message dropped still", after)
	}
}
