package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// publishPoison publishes n unbatched messages {"seq":i,"poison":...}, poison for the
// sequence numbers in poison, keyed and with properties, and returns nothing: the test
// reads them back by seq.
func publishPoison(t testing.TB, b *broker.Broker, topic string, n int, poison map[int]bool) {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		payload := fmt.Sprintf(`{"seq":%d,"poison":%v}`, i, poison[i])
		if _, err := p.Send(context.Background(), &official.ProducerMessage{Payload: []byte(payload), Key: fmt.Sprintf("k%d", i),
			Properties: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// retryEnvelope is what the tests read of a JSON-envelope record.
type retryEnvelope struct {
	MessageID       string            `json:"messageId"`
	Key             string            `json:"key"`
	Properties      map[string]string `json:"properties"`
	RedeliveryCount int               `json:"redeliveryCount"`
	Payload         struct {
		Seq    int
		Poison bool
	}
	at time.Time
}

// subscriptionBacklog is the subscription's backlog on topic, from the broker's stats.
func subscriptionBacklog(t testing.TB, b *broker.Broker, topic, sub string) int64 {
	t.Helper()
	return getSubscriptionStats(t, b, topic, sub).MsgBacklog
}

// TestEgressPoisonMessagesAreDeadLettered: a client nacks every message whose payload
// says poison and acks the rest. The others are delivered once each; each poison message
// comes back with its redelivery count up by one each time, never before the backoff
// (initial 1 s × 1.6 per attempt, -20 % jitter) has passed, is delivered exactly
// maxDeliveries times, then appears once on <topic>-<subscription>-DLQ (read with the
// official client) with its key, properties and the origin topic and id, and is no
// longer in the subscription's backlog.
func TestEgressPoisonMessagesAreDeadLettered(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "nack")
	poison := map[int]bool{3: true, 7: true}
	const n, maxDeliveries = 10, 4
	publishPoison(t, b, topic, n, poison)
	// The DLQ's reader subscribes first, so it sees what is published there.
	oc := newOfficialClient(t, b)
	dlq, err := oc.Subscribe(official.ConsumerOptions{Topic: topic + "-bridge-out-DLQ", SubscriptionName: "check",
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    retry: {initial: 1s, multiplier: 1.6, jitter: 0.2, max: 120s, maxDeliveries: %d}
`, b.URL, topic, maxDeliveries))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	seen := map[int][]retryEnvelope{}
	origin := map[int]string{} // seq -> message id
	settled, deadLettered := 0, 0
	for settled < n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("after %d messages settled: %v (seen %v)", settled, err, seen)
		}
		var e retryEnvelope
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		e.at = time.Now()
		seq := e.Payload.Seq
		seen[seq] = append(seen[seq], e)
		origin[seq] = e.MessageID
		endpoint := "/ack"
		if e.Payload.Poison {
			endpoint = "/nack"
		}
		js, _ := json.Marshal([]string{e.MessageID})
		st, m := postAck(t, p.DataURL+"/v1/streams/out"+endpoint, sid, "application/json", js)
		if st != 200 {
			t.Fatalf("POST %s %s: %d %v", endpoint, e.MessageID, st, m)
		}
		if !e.Payload.Poison {
			settled++
		} else if m["deadLettered"] == float64(1) {
			settled++
			deadLettered++
		}
	}
	for seq := range n {
		got := seen[seq]
		if !poison[seq] {
			if len(got) != 1 || got[0].RedeliveryCount != 0 {
				t.Errorf("seq %d delivered %d times: %+v", seq, len(got), got)
			}
			continue
		}
		if len(got) != maxDeliveries {
			t.Fatalf("poison seq %d delivered %d times, want %d", seq, len(got), maxDeliveries)
		}
		var gaps []string
		for i := 1; i < maxDeliveries; i++ {
			if got[i].RedeliveryCount != i {
				t.Errorf("poison seq %d, delivery %d: redeliveryCount %d", seq, i+1, got[i].RedeliveryCount)
			}
			// The backoff before delivery i+1 is 1 s × 1.6^(i-1), less 20 % at most.
			min := time.Duration(float64(time.Second) * pow(1.6, i-1) * 0.8)
			gap := got[i].at.Sub(got[i-1].at)
			if gap < min {
				t.Errorf("poison seq %d came back %v after delivery %d, before its backoff's lower bound %v", seq, gap, i, min)
			}
			gaps = append(gaps, gap.Round(10*time.Millisecond).String())
		}
		t.Logf("poison seq %d: delivered %d times, gaps %v (backoff 1s, 1.6s, 2.56s ±20%%)", seq, maxDeliveries, gaps)
	}
	// Each poison message is on the DLQ once, as the official client reads it.
	onDLQ := map[int]int{}
	for range len(poison) {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := dlq.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("the DLQ holds %d messages, want %d: %v", len(onDLQ), len(poison), err)
		}
		var body struct{ Seq int }
		if err := json.Unmarshal(m.Payload(), &body); err != nil || !poison[body.Seq] {
			t.Fatalf("on the DLQ: %q %v", m.Payload(), err)
		}
		onDLQ[body.Seq]++
		props := m.Properties()
		id := strings.Split(origin[body.Seq], ":") // ledger:entry:partition:batchIndex
		if m.Key() != fmt.Sprintf("k%d", body.Seq) || props["i"] != fmt.Sprint(body.Seq) || props["REAL_TOPIC"] != topic ||
			props["ORIGIN_MESSAGE_ID"] != strings.Join(id[:3], ":") {
			t.Errorf("dead letter of seq %d: key %q, properties %v (origin id %s)", body.Seq, m.Key(), props, origin[body.Seq])
		}
		_ = dlq.Ack(m)
	}
	if len(onDLQ) != len(poison) || deadLettered != len(poison) {
		t.Fatalf("on the DLQ %v, dead-lettered %d", onDLQ, deadLettered)
	}
	// Every message was acknowledged in the end, the poison ones after their DLQ publication.
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "bridge-out") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d after every message was settled", subscriptionBacklog(t, b, topic, "bridge-out"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Nothing more on the DLQ: each poison message went there once.
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if m, err := dlq.Receive(rctx); err == nil {
		t.Fatalf("a second dead letter: %q %v", m.Payload(), m.Properties())
	}
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}

// TestEgressPoisonCountRestartsAfterABridgeKill: the bridge (the subscription's only
// consumer) is killed (SIGKILL) while a poison message's second delivery is unanswered,
// and a new bridge takes over. No message is lost: each other one is acknowledged, the
// poison one reaches the DLQ once. Its redelivery count is the broker's, which the broker
// forgets when a Shared subscription is left without consumers: it starts again from 0,
// so the message gets maxDeliveries more deliveries (as docs/http-api.md documents).
func TestEgressPoisonCountRestartsAfterABridgeKill(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "nackkill")
	const n, maxDeliveries = 6, 4
	publishPoison(t, b, topic, n, map[int]bool{2: true})
	oc := newOfficialClient(t, b)
	dlq, err := oc.Subscribe(official.ConsumerOptions{Topic: topic + "-bridge-out-DLQ", SubscriptionName: "check",
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	cfg := fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    retry: {initial: 500ms, multiplier: 1.6, jitter: 0.2, max: 120s, maxDeliveries: %d}
`, b.URL, topic, maxDeliveries)
	acked := map[int]bool{}
	var counts []int // the poison message's redeliveryCount at each delivery
	run := func(p *bridgeProc, killAt int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
		defer resp.Body.Close()
		sid := resp.Header.Get("Stream-Id")
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				t.Fatalf("acked %v, poison counts %v: %v", acked, counts, err)
			}
			var e retryEnvelope
			if err := json.Unmarshal(rec, &e); err != nil {
				t.Fatal(err)
			}
			endpoint := "/ack"
			if e.Payload.Poison {
				counts = append(counts, e.RedeliveryCount)
				if len(counts) == killAt {
					// Killed with this delivery unanswered.
					_ = p.cmd.Process.Kill()
					<-p.exited
					return
				}
				endpoint = "/nack"
			}
			js, _ := json.Marshal([]string{e.MessageID})
			st, m := postAck(t, p.DataURL+"/v1/streams/out"+endpoint, sid, "application/json", js)
			if st != 200 {
				t.Fatalf("POST %s: %d %v", endpoint, st, m)
			}
			if !e.Payload.Poison {
				acked[e.Payload.Seq] = true
			}
			if m["deadLettered"] == float64(1) && len(acked) == n-1 {
				return
			}
			if m["deadLettered"] == float64(1) {
				t.Logf("dead-lettered before every other message was acknowledged (acked %v); reading on", acked)
			}
		}
	}
	run(startBridge(t, cfg), 2)
	before := counts[len(counts)-1]
	run(startBridge(t, cfg), -1)
	t.Logf("poison redelivery counts, delivery by delivery, across the kill at the 2nd: %v; acked %d others", counts, len(acked))
	if len(acked) != n-1 {
		t.Fatalf("acknowledged %v of the %d other messages", acked, n-1)
	}
	if before != 1 || fmt.Sprint(counts[2:]) != "[0 1 2 3]" {
		t.Fatalf("redelivery counts %v: want [0 1] before the kill, then [0 1 2 3] (the broker's count starts again, dead-lettered on the %dth delivery)", counts, maxDeliveries)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	m, err := dlq.Receive(rctx)
	if err != nil {
		t.Fatalf("nothing on the DLQ: %v", err)
	}
	if !strings.Contains(string(m.Payload()), `"seq":2`) {
		t.Fatalf("on the DLQ: %q", m.Payload())
	}
}

// TestEgressAcksByPosition: envelope=none clients acknowledge by record position.
// Exclusive: a client acks through=4 of 10 records, one cumulative acknowledgement, and
// goes away; the next client gets exactly the records from 5 on (nothing acknowledged
// that was not), acks them all through=N, and the backlog is empty. Shared, two
// clients: each acknowledges its own records by position, individually; together they
// get every message, and the backlog is empty.
func TestEgressAcksByPosition(t *testing.T) {
	b := broker.Get(t)
	exTopic, shTopic := b.Topic(t, "posex"), b.Topic(t, "possh")
	const n = 10
	publishPoison(t, b, exTopic, n, nil)
	publishPoison(t, b, shTopic, 2*n, nil)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: ex
    topics: [%s]
    position: earliest
    type: exclusive
    ack: client
  - name: sh
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    receiverQueue: 5
`, b.URL, exTopic, shTopic))
	type client struct {
		resp *http.Response
		rd   *recordio.Reader
		sid  string
	}
	open := func(ctx context.Context, stream string) client {
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/"+stream, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", stream, resp.StatusCode)
		}
		return client{resp, recordio.NewReader(resp.Body), resp.Header.Get("Stream-Id")}
	}
	seqOf := func(c client) int {
		rec, err := c.rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Seq int }
		if err := json.Unmarshal(rec, &body); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		return body.Seq
	}
	// Exclusive, first client: reads all 10, acknowledges through position 4, leaves.
	ctx1, cancel1 := context.WithTimeout(context.Background(), 60*time.Second)
	c1 := open(ctx1, "ex")
	for i := range n {
		if s := seqOf(c1); s != i {
			t.Fatalf("exclusive record %d is seq %d", i, s)
		}
	}
	if st, m := postAck(t, p.DataURL+"/v1/streams/ex/ack?through=4", c1.sid, "", nil); st != 200 || m["acked"] != float64(5) || m["cumulative"] != float64(1) {
		t.Fatalf("ack through=4: %d %v", st, m)
	}
	cancel1()
	c1.resp.Body.Close()
	// The next client gets the records from seq 5 on, at positions 0..4.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	var c2 client
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := egressGet(t, ctx2, p.DataURL+"/v1/streams/ex", nil)
		if resp.StatusCode == 200 {
			c2 = client{resp, recordio.NewReader(resp.Body), resp.Header.Get("Stream-Id")}
			break
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("reopening the exclusive stream: %d", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond) // the first consumer's close reaches the broker
	}
	defer c2.resp.Body.Close()
	for i := 5; i < n; i++ {
		if s := seqOf(c2); s != i {
			t.Fatalf("after the cumulative ack through seq 4, the next client's record is seq %d, want %d", s, i)
		}
	}
	if st, m := postAck(t, p.DataURL+"/v1/streams/ex/ack?through=4", c2.sid, "", nil); st != 200 || m["acked"] != float64(5) || m["cumulative"] != float64(1) {
		t.Fatalf("second client's ack through=4: %d %v", st, m)
	}
	// Shared, two clients, individual acks by position.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel3()
	a, bb := open(ctx3, "sh"), open(ctx3, "sh")
	defer a.resp.Body.Close()
	defer bb.resp.Body.Close()
	got := make(chan int, 2*n)
	errs := make(chan error, 2)
	for _, c := range []client{a, bb} {
		go func() {
			for pos := 0; ; pos++ {
				rec, err := c.rd.Next()
				if err != nil {
					errs <- nil // the test ended the stream
					return
				}
				var body struct{ Seq int }
				_ = json.Unmarshal(rec, &body)
				js, _ := json.Marshal([]int{pos})
				req, _ := http.NewRequest(http.MethodPost, p.DataURL+"/v1/streams/sh/ack", bytes.NewReader(js))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Stream-Id", c.sid)
				resp, err := h1Client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("ack of position %d: %d", pos, resp.StatusCode)
					return
				}
				got <- body.Seq
			}
		}()
	}
	seen := map[int]int{}
	timeout := time.After(60 * time.Second)
	for len(seen) < 2*n {
		select {
		case s := <-got:
			seen[s]++
		case err := <-errs:
			t.Fatalf("a shared client: %v (seen %v)", err, seen)
		case <-timeout:
			t.Fatalf("the shared clients got %d of %d messages: %v", len(seen), 2*n, seen)
		}
	}
	// An acknowledgement of a position the client was never given is refused.
	if st, m := postAck(t, p.DataURL+"/v1/streams/sh/ack", a.sid, "application/json", []byte("[999]")); st != 400 {
		t.Fatalf("ack of a position never written: %d %v", st, m)
	}
	for _, tc := range []struct{ topic, sub string }{{exTopic, "bridge-ex"}, {shTopic, "bridge-sh"}} {
		deadline := time.Now().Add(30 * time.Second)
		for subscriptionBacklog(t, b, tc.topic, tc.sub) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: backlog %d after every record was acknowledged by position", tc.sub, subscriptionBacklog(t, b, tc.topic, tc.sub))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("exclusive: through=4 twice (cumulative), the second client resumed at seq 5; shared: %d messages over two clients acked by position %v", len(seen), seen)
}

// TestEgressMaxRate: a stream with maxRate 200 over a 10 000-message backlog delivers at
// most 200 records/s (plus its one-second burst) and not much less, the broker dispatches
// no more than what was written plus the receiver window (the backlog stays on the
// broker), the bridge's memory stays flat, and another stream on the same bridge runs
// unthrottled meanwhile: several times the limited one's rate, measured in the same run.
func TestEgressMaxRate(t *testing.T) {
	b := broker.Get(t)
	slowTopic, fastTopic := b.Topic(t, "rate"), b.Topic(t, "unrated")
	publishUnbatchedAsync(t, b, slowTopic, 10_000)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: limited
    topics: [%s]
    position: earliest
    maxRate: 200
    receiverQueue: 100
  - name: fast
    topics: [%s]
    position: earliest
`, b.URL, slowTopic, fastTopic))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/limited", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	read := func(n int) error {
		for i := range n {
			if _, err := rd.Next(); err != nil {
				return fmt.Errorf("limited stream, record %d: %v", i, err)
			}
		}
		return nil
	}
	if err := read(400); err != nil { // past the start-up burst (a second's worth)
		t.Fatal(err)
	}
	rss0 := processRSS(t, p.cmd.Process.Pid)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- read(2000) }()
	fastRate := fastStream(t, b, p, fastTopic, 5000) // while the limited one runs
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	rate := 2000 / elapsed.Seconds()
	rss1 := processRSS(t, p.cmd.Process.Pid)
	s := getSubscriptionStats(t, b, slowTopic, "bridge-limited")
	t.Logf("limited: %.1f records/s over %d records; broker dispatched %d (backlog %d); RSS %d -> %d MiB; the other stream meanwhile: %.0f records/s",
		rate, 2000, s.MsgOutCounter, s.MsgBacklog, rss0>>20, rss1>>20, fastRate)
	// The ceiling is the limiter's and no machine makes it faster: 200 a second plus the
	// burst (a second's worth, which may have refilled while the first 400 were read:
	// 200 in 2000, +10 %) and timer rounding: 230. The floor has slack for a loaded machine,
	// where the client and the bridge fall behind the pace now and then: 150 (-25 %); a
	// limiter charging twice would give 100.
	if rate < 150 || rate > 230 {
		t.Errorf("maxRate 200: %.1f records/s, want 150..230", rate)
	}
	// Written: 2400 records; the consumer holds at most its receiver window (100) more.
	if s.MsgOutCounter > 2400+100 {
		t.Errorf("the broker dispatched %d messages for 2400 written: the limited stream buffers instead of leaving the backlog on the broker", s.MsgOutCounter)
	}
	if rss1-rss0 > 32<<20 {
		t.Errorf("the bridge's RSS grew %d MiB while rate-limited", (rss1-rss0)>>20)
	}
	// Unthrottled: at least twice the limited stream's rate, in the same run on the same
	// machine (it reaches thousands a second when idle; a limit that leaked onto it would
	// hold it at about 1x).
	if fastRate < 2*rate {
		t.Errorf("the unlimited stream ran at %.0f records/s next to a limited one at %.0f: less than twice its rate", fastRate, rate)
	}
}

// publishUnbatchedAsync publishes n small messages, one per entry, so the broker's
// dispatch counters count messages.
func publishUnbatchedAsync(t testing.TB, b *broker.Broker, topic string, n int) {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i))},
			func(_ official.MessageID, _ *official.ProducerMessage, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestEgressRedeliveryCountForBarePayloads: an envelope=none client nacks a record by
// position; when it comes back, GET <path>/ack?positions=N says its redelivery count.
func TestEgressRedeliveryCountForBarePayloads(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "barecount")
	publishPoison(t, b, topic, 1, nil)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: bare
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    retry: {initial: 100ms}
`, b.URL, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/bare", nil)
	defer resp.Body.Close()
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	count := func(pos int) float64 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/streams/bare/ack?positions=%d", p.DataURL, pos), nil)
		req.Header.Set("Stream-Id", sid)
		r, err := h1Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var ans struct {
			Records []struct{ RedeliveryCount float64 }
		}
		if err := json.NewDecoder(r.Body).Decode(&ans); err != nil || r.StatusCode != 200 || len(ans.Records) != 1 {
			t.Fatalf("lookup of position %d: %d %+v %v", pos, r.StatusCode, ans, err)
		}
		return ans.Records[0].RedeliveryCount
	}
	for pos := range 2 {
		rec, err := rd.Next()
		if err != nil || !strings.Contains(string(rec), `"seq":0`) {
			t.Fatalf("record %d: %q %v", pos, rec, err)
		}
		if c := count(pos); c != float64(pos) {
			t.Fatalf("position %d: redeliveryCount %v, want %d", pos, c, pos)
		}
		endpoint := "/nack"
		if pos == 1 {
			endpoint = "/ack"
		}
		if st, m := postAck(t, p.DataURL+"/v1/streams/bare"+endpoint, sid, "application/json", []byte(fmt.Sprintf("[%d]", pos))); st != 200 {
			t.Fatalf("POST %s [%d]: %d %v", endpoint, pos, st, m)
		}
	}
}
