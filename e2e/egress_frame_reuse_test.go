package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// reuseKind is what the client of TestEgressRecordsStayIntactWhileTheBridgeReusesFrames
// does with message seq.
func reuseKind(seq int) string {
	switch {
	case seq%9 == 4:
		return "poison" // nacked on every delivery: dead-lettered at maxDeliveries
	case seq%7 == 2:
		return "once" // nacked on its first delivery, acknowledged on its second
	case seq%11 == 6:
		return "late" // left to its ackTimeout on its first delivery, acknowledged on its second
	}
	return "ok"
}

// TestEgressRecordsStayIntactWhileTheBridgeReusesFrames: the bridge's consumer reads
// frames into buffers it reuses once every message of a frame is written and settled.
// 300 messages of 1 KiB, batched 10 to an entry by the official client (so each frame
// is some 10 KiB, a pooled buffer), uncompressed, LZ4 and ZSTD, go out of an ack=client
// stream whose client acknowledges most of them as it reads, nacks some once, leaves
// some to their ackTimeout once, and nacks the poison ones until they are dead-lettered:
// every record written, first delivery or redelivery, reads as it was published, and
// so does every dead letter. Run on a bridge built with -tags framepoison (released
// frames filled with 0xDB), a record written from a frame given back too early shows.
func TestEgressRecordsStayIntactWhileTheBridgeReusesFrames(t *testing.T) {
	for name, c := range map[string]official.CompressionType{"none": official.NoCompression, "lz4": official.LZ4, "zstd": official.ZSTD} {
		t.Run(name, func(t *testing.T) { testFrameReuse(t, c) })
	}
}

func testFrameReuse(t *testing.T, compression official.CompressionType) {
	b := broker.Get(t)
	topic := b.Topic(t, "reuse")
	const n, maxDeliveries = 300, 3
	oc := newOfficialClient(t, b)
	p, err := oc.CreateProducer(official.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Minute,
		BatchingMaxSize: 1 << 20, CompressionType: compression})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(compression), 7))
	sent := map[int][]byte{}
	errs := make(chan error, n)
	for i := range n {
		// Compact JSON (the envelope carries it as it is) of random letters, so a
		// compressed batch stays above the pooled size too.
		pad := make([]byte, 1000)
		for j := range pad {
			pad[j] = byte('a' + rng.IntN(26))
		}
		payload := fmt.Appendf(nil, `{"seq":%d,"kind":%q,"pad":%q}`, i, reuseKind(i), pad)
		sent[i] = payload
		p.SendAsync(ctx, &official.ProducerMessage{Payload: payload}, func(_ official.MessageID, _ *official.ProducerMessage, err error) { errs <- err })
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	dlq, err := oc.Subscribe(official.ConsumerOptions{Topic: topic + "-bridge-out-DLQ", SubscriptionName: "check",
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	bp := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    ackTimeout: 1s
    maxUnacked: 100000
    retry: {initial: 100ms, multiplier: 1, jitter: 0, max: 100ms, maxDeliveries: %d}
`, b.URL, topic, maxDeliveries))
	resp := egressGet(t, ctx, bp.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	seen := map[int]int{}
	entries := map[string]bool{}
	settled, deadLettered, records := 0, 0, 0
	var acks []string
	flushAcks := func() {
		if len(acks) == 0 {
			return
		}
		js, _ := json.Marshal(acks)
		if st, m := postAck(t, bp.DataURL+"/v1/streams/out/ack", sid, "application/json", js); st != 200 {
			t.Fatalf("POST /ack: %d %v", st, m)
		}
		acks = acks[:0]
	}
	for settled < n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("after %d records, %d messages settled: %v", records, settled, err)
		}
		records++
		var e struct {
			MessageID     string          `json:"messageId"`
			Payload       json.RawMessage `json:"payload"`
			PayloadBase64 []byte          `json:"payloadBase64"` // a payload that is not JSON
		}
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("record %d, %.60q...: not an envelope: %v", records, rec, err)
		}
		if e.PayloadBase64 != nil {
			e.Payload = e.PayloadBase64 // 0xDB...: written from a frame given back
		}
		var body struct{ Seq int }
		if err := json.Unmarshal(e.Payload, &body); err != nil || body.Seq < 0 || body.Seq >= n {
			t.Fatalf("record %d (%s): payload %.60q... is none published: %v", records, e.MessageID, e.Payload, err)
		}
		seq := body.Seq
		if string(e.Payload) != string(sent[seq]) {
			t.Fatalf("record %d (%s), seq %d: payload %.60q..., published %.60q...", records, e.MessageID, seq, e.Payload, sent[seq])
		}
		if id := strings.Split(e.MessageID, ":"); len(id) == 4 {
			entries[id[0]+":"+id[1]] = true
		}
		seen[seq]++
		kind := reuseKind(seq)
		switch {
		case kind == "late" && seen[seq] == 1:
			// Left to its ackTimeout.
		case kind == "poison" || kind == "once" && seen[seq] == 1:
			flushAcks()
			js, _ := json.Marshal([]string{e.MessageID})
			st, m := postAck(t, bp.DataURL+"/v1/streams/out/nack", sid, "application/json", js)
			if st != 200 {
				t.Fatalf("POST /nack %s: %d %v", e.MessageID, st, m)
			}
			if m["deadLettered"] == float64(1) {
				settled++
				deadLettered++
			}
		default:
			acks = append(acks, e.MessageID)
			settled++
			if len(acks) >= 16 {
				flushAcks()
			}
		}
		if settled >= n {
			flushAcks()
		}
		if records%50 == 0 {
			flushAcks() // what waits for its redelivery is not held up behind unsent acks
		}
	}
	if len(entries) < n/10 {
		t.Fatalf("the %d messages came in %d entries: the producer did not batch", n, len(entries))
	}
	poison := 0
	for seq := range n {
		if reuseKind(seq) == "poison" {
			poison++
		}
	}
	if deadLettered != poison {
		t.Fatalf("%d dead-lettered, want the %d poison messages", deadLettered, poison)
	}
	for range poison {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := dlq.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("the dead-letter topic holds fewer than the %d poison messages: %v", poison, err)
		}
		var body struct{ Seq int }
		if err := json.Unmarshal(m.Payload(), &body); err != nil || reuseKind(body.Seq) != "poison" || string(m.Payload()) != string(sent[body.Seq]) {
			t.Fatalf("a dead letter reads %.60q..., not a poison message as published (%v)", m.Payload(), err)
		}
		_ = dlq.Ack(m)
	}
	t.Logf("%d records written for %d messages in %d entries, %d dead-lettered", records, n, len(entries), deadLettered)
}
