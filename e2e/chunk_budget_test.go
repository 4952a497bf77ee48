package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// chunkMetadata is a MessageMetadata (producer_name 1, sequence_id 2, publish_time 3,
// uncompressed_size 9, uuid 26, num_chunks_from_msg 27, total_chunk_msg_size 28,
// chunk_id 29) of chunk id of a message of total chunks and size bytes.
func chunkMetadata(uuid string, id, total, size int) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "half-done")
	for _, f := range []struct {
		num protowire.Number
		v   uint64
	}{{2, uint64(id)}, {3, uint64(time.Now().UnixMilli())}, {9, uint64(size)}, {27, uint64(total)}, {28, uint64(size)}, {29, uint64(id)}} {
		b = protowire.AppendTag(b, f.num, protowire.VarintType)
		b = protowire.AppendVarint(b, f.v)
	}
	b = protowire.AppendTag(b, 26, protowire.BytesType)
	return protowire.AppendString(b, uuid)
}

// TestEgressReassemblyOfIncompleteChunkedMessagesStaysInsideTheBudget: a producer leaves
// 40 chunked messages incomplete on the real broker, interleaved (3 of 4 chunks of 64 KiB
// each, 7.5 MiB in all), then a plain message follows. A bridge with memory.budget 1MiB
// streams the topic: its consumer reassembled all 40 at once, 7.5 MiB past the budget
// (nothing queued, so each chunk's returned permit was granted again). Now reassembly
// stays inside the budget but for one message held beyond it, the messages pushed out
// are counted on /metrics, and the plain message is delivered.
func TestEgressReassemblyOfIncompleteChunkedMessagesStaysInsideTheBudget(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "halfchunks")
	const (
		messages = 40
		part     = 64 << 10
		limit    = 1 << 20
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	payload := []byte(strings.Repeat("c", part))
	for id := range 3 { // of 4: the last chunk never comes
		for u := range messages {
			if err := pulsartest.Publish(ctx, b.URL, topic, chunkMetadata(fmt.Sprint("u", u), id, 4, 4*part), payload); err != nil {
				t.Fatalf("publishing chunk %d of message %d: %v", id, u, err)
			}
		}
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("marker")}); err != nil {
		t.Fatal(err)
	}

	p := startBridge(t, fmt.Sprintf(`memory:
  budget: %d
pulsar:
  url: %s
streams:
  - name: half
    topics: [%s]
    position: earliest
`, limit, b.URL, topic))
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/half", nil)
	defer resp.Body.Close()
	rec, err := recordio.NewReader(resp.Body).Next()
	if err != nil || string(rec) != "marker" {
		t.Fatalf("first record %q, %v; want the marker (no incomplete message can be delivered)", rec, err)
	}
	m := scrape(t, p.OpsURL)
	peak := metricValue(t, m, "bridge_memory_budget_peak_bytes")
	dropped := metricValue(t, m, `bridge_egress_discarded_total{reason="chunked_incomplete"}`)
	t.Logf("memory.budget %d: peak %.0f bytes; %.0f chunked messages dropped", limit, peak, dropped)
	// The budget, one message held beyond it (4 chunks), the one permit an idle partition
	// gets beyond it, and the marker.
	if peak < 0 || peak > limit+6*part {
		t.Fatalf("bridge_memory_budget_peak_bytes %.0f: reassembly took the budget (%d) past it by more than one message", peak, limit)
	}
	if dropped < 1 {
		t.Fatalf(`bridge_egress_discarded_total{reason="chunked_incomplete"} is %.0f: the messages pushed out were not counted`, dropped)
	}
}
