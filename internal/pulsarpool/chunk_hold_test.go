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
)

// TestAStreamHoldingDeliveriesBehindAnIncompleteChunkedMessageStaysInTheBudget: a
// producer killed after the first chunk of a 2-chunk message; the partition's next
// entries are ordinary messages. The stream (ack=client, the client not acknowledging
// yet) takes and holds every one. While the incomplete chunked message is the only one
// being reassembled (until ChunkExpiry, 1 min by default), the consumer grants the idle
// partition its permit beyond the spent budget although the stream holds unsettled
// deliveries: every message the stream takes brings one more past the budget, up to
// maxUnacked of them.
func TestAStreamHoldingDeliveriesBehindAnIncompleteChunkedMessageStaysInTheBudget(t *testing.T) {
	const (
		limit = 64 << 10
		size  = 8 << 10
		n     = 40
	)
	b := fakeBroker(t)
	bud := budget.New(limit)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-dangling-chunk"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 1000, ReceiverQueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	bud.Charge(limit) // ingress spends the budget
	defer bud.Release(limit)
	// MessageMetadata of chunk 0 of 2 (field numbers: PulsarApi.proto).
	var md []byte
	md = protowire.AppendTag(md, 1, protowire.BytesType)
	md = protowire.AppendString(md, "dead-producer")
	for _, f := range []struct {
		num protowire.Number
		v   uint64
	}{{2, 0}, {3, 1}, {9, 2 * size}, {27, 2}, {28, 2 * size}, {29, 0}} {
		md = protowire.AppendTag(md, f.num, protowire.VarintType)
		md = protowire.AppendVarint(md, f.v)
	}
	md = protowire.AppendTag(md, 26, protowire.BytesType)
	md = protowire.AppendString(md, "u")
	b.Deliver(topic, pulsartest.Outgoing{RawMetadata: md, Payload: []byte(strings.Repeat("c", size))})
	p := make([]byte, size)
	var ps [][]byte
	for range n {
		ps = append(ps, p)
	}
	b.DeliverPayloads(topic, ps...)
	var held []*egress.Delivery
	for {
		short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		d, err := sub.Receive(short)
		stop()
		if err != nil {
			break
		}
		held = append(held, d) // written to an ack=client client that has not acked yet
	}
	used := bud.Stats().Used
	if used > limit+3*size {
		t.Fatalf("the stream holds %d unsettled deliveries: budget %d bytes, %d beyond the limit %d (%d messages' worth)",
			len(held), used, used-limit, limit, (used-limit)/size)
	}
	for _, d := range held {
		_ = sub.Ack(d)
	}
}
