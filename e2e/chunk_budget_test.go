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
// 20 chunked messages incomplete on the real broker (the first of 4 chunks of 64 KiB each,
// 1.25 MiB in all), then a plain message follows. A bridge with memory.budget 1MiB
// streams the topic: its consumer once reassembled them all past the budget (nothing
// queued, so each chunk's returned permit was granted again; 40 messages of 3 chunks took
// the peak to 7 995 392 bytes). Now a partition reassembling more than one message gets
// permits only as the budget covers them: reassembly stays inside the budget but for one
// permit, the incomplete messages go at their expiry (1 min), counted on /metrics, and
// the plain message is delivered.
func TestEgressReassemblyOfIncompleteChunkedMessagesStaysInsideTheBudget(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "halfchunks")
	const (
		messages = 20
		part     = 64 << 10
		limit    = 1 << 20
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	payload := []byte(strings.Repeat("c", part))
	for u := range messages { // the first chunk of 4 only: the others never come
		if err := pulsartest.Publish(ctx, b.URL, topic, chunkMetadata(fmt.Sprint("u", u), 0, 4, 4*part), payload); err != nil {
			t.Fatalf("publishing the first chunk of message %d: %v", u, err)
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
	// The budget, one chunk a partition reassembling a message alone gets beyond it, the
	// one permit an idle partition gets beyond it, and the marker.
	if peak > limit+6*part {
		t.Fatalf("bridge_memory_budget_peak_bytes %.0f: reassembly took the budget (%d) past it by more than one message", peak, limit)
	}
	if dropped < 1 {
		t.Fatalf(`bridge_egress_discarded_total{reason="chunked_incomplete"} is %.0f: the messages pushed out were not counted`, dropped)
	}
}

// TestEgressInterleavedChunkedMessagesSurviveASpentBudget: two producers' chunked messages
// interleave on one topic of the real broker (A0 B0 A1 B1 ...) while another stream of
// the same bridge spends memory.budget (its client reads one record and stops, ack=client).
// The second message's first chunk found the budget spent and the consumer dropped the
// first message and acknowledged its chunks: a whole message on the broker lost to the
// subscription for good (bridge_egress_discarded_total{reason="chunked_incomplete"} 1).
// Now the partition waits for room, and both messages are delivered once the other
// stream's client goes away and its deliveries free the budget.
func TestEgressInterleavedChunkedMessagesSurviveASpentBudget(t *testing.T) {
	b := broker.Get(t)
	held, chunked := b.Topic(t, "spender"), b.Topic(t, "interleaved")
	const (
		part   = 64 << 10
		chunks = 4
		budget = 1 << 20
	)
	payloads := publishOfficial(t, b, held, 60, 4, part)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for id := range chunks {
		for _, u := range []string{"A", "B"} {
			data := []byte(strings.Repeat(u, part))
			if err := pulsartest.Publish(ctx, b.URL, chunked, chunkMetadata(u, id, chunks, chunks*part), data); err != nil {
				t.Fatalf("publishing chunk %d of message %s: %v", id, u, err)
			}
		}
	}
	p := startBridge(t, fmt.Sprintf(`memory:
  budget: %d
pulsar:
  url: %s
egress:
  writeTimeout: 5m
streams:
  - name: spender
    topics: [%s]
    position: earliest
    ack: client
    ackTimeout: 10m
  - name: chunked
    topics: [%s]
    position: earliest
`, budget, b.URL, held, chunked))
	spendCtx, stopSpending := context.WithCancel(ctx)
	defer stopSpending()
	spender := egressGet(t, spendCtx, p.DataURL+"/v1/streams/spender", nil)
	defer spender.Body.Close()
	if _, err := recordio.NewReader(spender.Body, recordio.BufferSize(len(payloads[0])+100)).Next(); err != nil {
		t.Fatal(err)
	}
	// The client reads no more: its stream and queue spend the budget.
	const used = "bridge_memory_budget_used_bytes"
	for {
		u := metricValue(t, scrape(t, p.OpsURL), used)
		if budget-u < part {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the budget never filled: %.0f of %d bytes used", u, budget)
		case <-time.After(50 * time.Millisecond):
		}
	}
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/chunked", nil)
	defer resp.Body.Close()
	// Both messages' first chunks reach the consumer (the broker counts them out).
	for {
		s := getSubscriptionStats(t, b, chunked, "bridge-chunked")
		if s.MsgOutCounter >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker never dispatched both first chunks: %d dispatched", s.MsgOutCounter)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopSpending() // the spender's client goes away: its deliveries free the budget
	rd := recordio.NewReader(resp.Body, recordio.BufferSize(chunks*part+100))
	got := map[string]bool{}
	for len(got) < 2 {
		rec, err := rd.Next()
		if err != nil {
			m := scrape(t, p.OpsURL)
			t.Fatalf("%d of 2 chunked messages delivered (%v): %v; chunked messages dropped: %.0f", len(got), got, err,
				metricValue(t, m, `bridge_egress_discarded_total{reason="chunked_incomplete"}`))
		}
		if len(rec) != chunks*part || strings.Count(string(rec), string(rec[:1])) != len(rec) {
			t.Fatalf("a record of %d bytes, want one message of %d bytes of one letter", len(rec), chunks*part)
		}
		got[string(rec[:1])] = true
	}
	if d := metricValue(t, scrape(t, p.OpsURL), `bridge_egress_discarded_total{reason="chunked_incomplete"}`); d > 0 {
		t.Fatalf("bridge_egress_discarded_total{reason=\"chunked_incomplete\"} %.0f", d)
	}
}
