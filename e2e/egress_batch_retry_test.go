package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// batchKind is what the test client does with a message of TestEgressRetriesAndDeadLettersMessagesInsideBatches.
func batchKind(seq int, deadLetters bool) string {
	switch {
	case seq%4 == 1 && deadLetters:
		return "poison" // nacked on every delivery
	case seq%4 == 3:
		return "once" // nacked on its first delivery, acknowledged on its second
	}
	return "ok"
}

// publishBatched publishes n messages with the official client's batching producer, at
// most 10 to a batch and never flushed by time, so they land in ceil(n/10) entries; it
// returns each message's payload by sequence number.
func publishBatched(t testing.TB, b *broker.Broker, topic string, n int, deadLetters bool) map[int][]byte {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := map[int][]byte{}
	errs := make(chan error, n)
	for i := range n {
		// Bytes a re-encoding would change (spacing, escapes), so the dead letter's are
		// compared as published.
		payload := []byte(fmt.Sprintf(`{ "seq":%d,  "kind":"%s", "pad":"\u00e9\t%s" }`, i, batchKind(i, deadLetters), strings.Repeat("x", i)))
		sent[i] = payload
		p.SendAsync(ctx, &official.ProducerMessage{Payload: payload, Key: fmt.Sprintf("k%d", i),
			Properties: map[string]string{"i": strconv.Itoa(i)}}, func(_ official.MessageID, _ *official.ProducerMessage, err error) { errs <- err })
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return sent
}

// TestEgressRetriesAndDeadLettersMessagesInsideBatches: 20 messages published by the
// official client in two batches of 10 (checked: every delivered id has a batch index,
// and they name two entries). The HTTP client acknowledges the "ok" ones, nacks the
// "once" ones on their first delivery only and the "poison" ones on every delivery.
// A nacked message inside a batch used to never come back (acknowledging a batch-mate
// cancelled the nack): each "once" message is now delivered again, with redelivery
// count 1, not before its backoff, and each poison message is delivered exactly
// retry.maxDeliveries times (counts 0, 1, 2) and then reaches the dead-letter topic
// alone, byte for byte, with its key, its properties and the Java client's REAL_TOPIC,
// REAL_SUBSCRIPTION and ORIGIN_MESSAGE_ID (its own id, batch index included); the "ok"
// messages are never delivered again, and the subscription's backlog reaches 0 (the
// dead letters are acknowledged by batch index). On Exclusive and Failover
// subscriptions (no dead letters: Pulsar counts no redeliveries there) the "once"
// messages come back too, and nothing acknowledged does.
func TestEgressRetriesAndDeadLettersMessagesInsideBatches(t *testing.T) {
	for _, typ := range []string{"shared", "key_shared", "exclusive", "failover"} {
		t.Run(typ, func(t *testing.T) {
			testBatchRetries(t, typ)
		})
	}
}

func testBatchRetries(t *testing.T, typ string) {
	b := broker.Get(t)
	// The counts are the same either way: on a broker that redelivers whole batches the
	// bridge's consumer filters the acknowledged members out of the redeliveries it asks for.
	t.Logf("the broker keeps batch-index acknowledgements: %v", b.BatchIndexAcks(t))
	topic := b.Topic(t, "batchnack")
	const n, maxDeliveries = 20, 3
	deadLetters := typ == "shared" || typ == "key_shared"
	sent := publishBatched(t, b, topic, n, deadLetters)
	oc := newOfficialClient(t, b)
	dlq, err := oc.Subscribe(official.ConsumerOptions{Topic: topic + "-bridge-out-DLQ", SubscriptionName: "check",
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	retry := "retry: {initial: 1s, multiplier: 1.6, jitter: 0.2, max: 120s}"
	if deadLetters {
		retry = fmt.Sprintf("retry: {initial: 1s, multiplier: 1.6, jitter: 0.2, max: 120s, maxDeliveries: %d}", maxDeliveries)
	}
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: %s
    ack: client
    envelope: json
    %s
`, b.URL, topic, typ, retry))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	type delivery struct {
		id    string
		count int
		at    time.Time
	}
	seen := map[int][]delivery{}
	origin := map[int]string{}
	entries := map[string]bool{}
	settled, deadLettered := 0, 0
	for settled < n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("after %d messages settled: %v (seen %v)", settled, err, seen)
		}
		var e struct {
			MessageID       string `json:"messageId"`
			RedeliveryCount int    `json:"redeliveryCount"`
			Payload         struct {
				Seq  int
				Kind string
			}
		}
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		id := strings.Split(e.MessageID, ":") // ledger:entry:partition:batchIndex
		if len(id) != 4 || id[3] == "-1" {
			t.Fatalf("message id %s has no batch index: the producer did not batch", e.MessageID)
		}
		entries[id[0]+":"+id[1]] = true
		seq := e.Payload.Seq
		seen[seq] = append(seen[seq], delivery{e.MessageID, e.RedeliveryCount, time.Now()})
		origin[seq] = e.MessageID
		endpoint := "/ack"
		if e.Payload.Kind == "poison" || e.Payload.Kind == "once" && len(seen[seq]) == 1 {
			endpoint = "/nack"
		}
		js, _ := json.Marshal([]string{e.MessageID})
		st, m := postAck(t, p.DataURL+"/v1/streams/out"+endpoint, sid, "application/json", js)
		if st != 200 {
			t.Fatalf("POST %s %s: %d %v", endpoint, e.MessageID, st, m)
		}
		switch {
		case endpoint == "/ack":
			settled++
		case m["deadLettered"] == float64(1):
			settled++
			deadLettered++
		}
	}
	if len(entries) != 2 {
		t.Fatalf("the %d messages came in entries %v, want 2 batches", n, entries)
	}
	var poison []int
	for seq := range n {
		got := seen[seq]
		want := map[string]int{"ok": 1, "once": 2, "poison": maxDeliveries}[batchKind(seq, deadLetters)]
		if len(got) != want {
			var ds []string
			for _, d := range got {
				ds = append(ds, fmt.Sprintf("%s count %d at +%v", d.id, d.count, d.at.Sub(got[0].at).Round(time.Millisecond)))
			}
			t.Errorf("%s seq %d delivered %d times, want %d: %s", batchKind(seq, deadLetters), seq, len(got), want, strings.Join(ds, "; "))
			continue
		}
		if batchKind(seq, deadLetters) == "poison" {
			poison = append(poison, seq)
		}
		for i := 1; i < len(got); i++ {
			if got[i].id != got[0].id {
				t.Errorf("seq %d came back as %s, first %s", seq, got[i].id, got[0].id)
			}
			if deadLetters && got[i].count != i {
				t.Errorf("seq %d, delivery %d: redeliveryCount %d, want %d", seq, i+1, got[i].count, i)
			}
			// The backoff before delivery i+1 is 1 s × 1.6^r (r the count), less 20 % at most.
			r := 0
			if deadLetters {
				r = i - 1
			}
			if lower := time.Duration(float64(time.Second) * pow(1.6, r) * 0.8); got[i].at.Sub(got[i-1].at) < lower {
				t.Errorf("seq %d came back %v after delivery %d, before its backoff's lower bound %v", seq, got[i].at.Sub(got[i-1].at), i, lower)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if deadLettered != len(poison) {
		t.Fatalf("%d dead-lettered, want the %d poison messages", deadLettered, len(poison))
	}
	for range poison {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := dlq.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("the dead-letter topic holds fewer than the %d poison messages: %v", len(poison), err)
		}
		var body struct{ Seq int }
		if err := json.Unmarshal(m.Payload(), &body); err != nil || batchKind(body.Seq, true) != "poison" {
			t.Fatalf("on the dead-letter topic: %q %v", m.Payload(), err)
		}
		if string(m.Payload()) != string(sent[body.Seq]) {
			t.Errorf("dead letter of seq %d: %q, published %q", body.Seq, m.Payload(), sent[body.Seq])
		}
		props := m.Properties()
		want := map[string]string{"i": strconv.Itoa(body.Seq), "REAL_TOPIC": topic, "REAL_SUBSCRIPTION": "bridge-out",
			"ORIGIN_MESSAGE_ID": origin[body.Seq], "ORIGIN_MESSAGE_IDY_TIME": origin[body.Seq]}
		for k, v := range want {
			if props[k] != v {
				t.Errorf("dead letter of seq %d: property %s %q, want %q (all: %v)", body.Seq, k, props[k], v, props)
			}
		}
		if m.Key() != fmt.Sprintf("k%d", body.Seq) {
			t.Errorf("dead letter of seq %d: key %q", body.Seq, m.Key())
		}
		_ = dlq.Ack(m)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if m, err := dlq.Receive(rctx); err == nil {
		t.Fatalf("one more dead letter than poison messages: %q %v", m.Payload(), m.Properties())
	}
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "bridge-out") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d after every message was settled", subscriptionBacklog(t, b, topic, "bridge-out"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
