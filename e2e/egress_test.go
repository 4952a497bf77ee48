package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	mesosrecordio "github.com/mesos/mesos-go/api/v1/lib/recordio"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// egressPayload is a message whose body names its key and sequence number.
func egressPayload(key string, seq int, pad int) []byte {
	return []byte(fmt.Sprintf(`{"key":%q,"seq":%d,"pad":%q}`, key, seq, strings.Repeat("p", pad)))
}

// publishOfficial publishes n messages over keys with the official client (batched,
// LZ4-compressed, keyed) and returns the payloads in order.
func publishOfficial(t testing.TB, b *broker.Broker, topic string, n, keys, pad int) [][]byte {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, CompressionType: official.LZ4, BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := make([][]byte, n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		key := fmt.Sprintf("k%02d", i%keys)
		out[i] = egressPayload(key, i, pad)
		wg.Add(1)
		p.SendAsync(context.Background(), &official.ProducerMessage{Payload: out[i], Key: key, Properties: map[string]string{"i": fmt.Sprint(i)}},
			func(_ official.MessageID, _ *official.ProducerMessage, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d official sends failed", failed.Load())
	}
	return out
}

// egressGet opens GET path on the bridge and returns the response (status checked by the caller).
func egressGet(t testing.TB, ctx context.Context, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/recordio")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type egressMsg struct {
	Key string
	Seq int
}

// TestEgressDeliversOfficialMessagesAsRecordIO: 100 000 messages published by the
// official client (batched, LZ4, keyed) reach an HTTP client as RecordIO records with
// identical bytes, decoded by mesos-go's reader, in per-key order.
func TestEgressDeliversOfficialMessagesAsRecordIO(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "egress")
	const n = 100_000
	sent := publishOfficial(t, b, topic, n, 16, 200)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
`, b.URL, topic))
	resp := egressGet(t, context.Background(), p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Stream-Id") == "" || resp.Header.Get("Message-Content-Type") != "application/json" {
		t.Fatalf("%s %v", resp.Status, resp.Header)
	}
	rd := mesosrecordio.NewReader(resp.Body)
	start := time.Now()
	last := map[string]int{}
	seen := make([]bool, n)
	for got := 0; got < n; got++ {
		frame, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("after %d records: %v", got, err)
		}
		var m egressMsg
		if err := json.Unmarshal(frame, &m); err != nil {
			t.Fatalf("record %d: %q", got, frame)
		}
		if !bytes.Equal(frame, sent[m.Seq]) {
			t.Fatalf("record for seq %d differs from what was published", m.Seq)
		}
		if l, ok := last[m.Key]; ok && m.Seq <= l {
			t.Fatalf("key %s: seq %d after %d", m.Key, m.Seq, l)
		}
		if seen[m.Seq] {
			t.Fatalf("seq %d twice", m.Seq)
		}
		seen[m.Seq] = true
		last[m.Key] = m.Seq
	}
	d := time.Since(start)
	t.Logf("100000 official messages (batched, LZ4, 16 keys) read over HTTP by mesos-go's RecordIO reader in %s (%.0f records/s): identical bytes, per-key order, no duplicates",
		d.Round(time.Millisecond), n/d.Seconds())
}

// TestEgressResumesAfterTheClientIsKilled: a client acknowledging what it has processed
// (ack=client, every 500 records) is killed mid-stream and reconnects to the same
// subscription: nothing is missing; duplicates are only what it had not acknowledged.
// (With ack=auto the contract is at-least-once to the socket: what sits in the kernel's
// buffers when a client dies is acknowledged already; see docs/http-api.md.)
func TestEgressResumesAfterTheClientIsKilled(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "resume")
	const n = 30_000
	publishOfficial(t, b, topic, n, 8, 100)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    ack: client
    envelope: json
    maxUnacked: 2000
`, b.URL, topic))
	count := make([]int, n)
	missing := n
	// session reads until limit records (or until nothing is missing), acknowledging
	// every 500, and then drops the connection without acknowledging the rest.
	session := func(limit int) (read, unacked int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", map[string]string{"Message-Accept": "application/json"})
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET: %s", resp.Status)
		}
		sid := resp.Header.Get("Stream-Id")
		rd := recordio.NewReader(resp.Body)
		var ids []string
		for read < limit && missing > 0 {
			rec, err := rd.Next()
			if err != nil {
				if limit == n && ctx.Err() != nil {
					break // the last session: nothing more came; what is missing is checked below
				}
				t.Fatalf("after %d records (%d missing): %v", read, missing, err)
			}
			var e struct {
				MessageID string `json:"messageId"`
				Payload   egressMsg
			}
			if err := json.Unmarshal(rec, &e); err != nil {
				t.Fatal(err)
			}
			if count[e.Payload.Seq] == 0 {
				missing--
			}
			count[e.Payload.Seq]++
			read++
			ids = append(ids, e.MessageID)
			if len(ids) == 500 {
				body, _ := json.Marshal(ids)
				if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", sid, "application/json", body); st != 200 {
					t.Fatalf("ack: %d %v", st, m)
				}
				ids = ids[:0]
			}
		}
		return read, len(ids)
	}
	first, unacked := session(12_250) // killed with 250 processed but not acknowledged
	// The Exclusive subscription takes the next client once the bridge has closed the
	// killed one's consumer: its stream is gone from /readyz.
	waitEgressStreams(t, p, 0)
	second, _ := session(n)
	dups := 0
	var lost []int
	for seq, c := range count {
		if c == 0 {
			lost = append(lost, seq)
			continue
		}
		dups += c - 1
	}
	if len(lost) > 0 {
		t.Fatalf("killed after %d records (%d not acknowledged); the reconnected client read %d more, and %d records never came (the first %v)",
			first, unacked, second, len(lost), lost[:min(len(lost), 10)])
	}
	t.Logf("killed after %d records (%d not acknowledged); the reconnected client read %d more: all %d present, %d duplicates",
		first, unacked, second, n, dups)
	// With batch-index acknowledgements (the test broker enables them), exactly what was
	// not acknowledged comes back; a broker without them would return whole batches.
	if dups > unacked {
		t.Fatalf("%d duplicates, but only %d records were not acknowledged", dups, unacked)
	}
}

// TestEgressSharedSubscriptionSpreadsMessages: four HTTP clients on one Shared
// subscription: every message reaches exactly one of them unless redelivered.
func TestEgressSharedSubscriptionSpreadsMessages(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "shared")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: out\n    topics: [%s]\n    type: shared\n    receiverQueue: 100\n", b.URL, topic))
	const n, clients = 20_000, 4
	var mu sync.Mutex
	count := make([]int, n)
	per := make([]int, clients)
	redelivered := 0
	total := 0
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for c := range clients {
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("client %d: %s", c, resp.Status)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			rd := recordio.NewReader(resp.Body)
			for {
				rec, err := rd.Next()
				if err != nil {
					return
				}
				var m egressMsg
				_ = json.Unmarshal(rec, &m)
				mu.Lock()
				count[m.Seq]++
				per[c]++
				total++
				if total == n {
					close(done)
				}
				mu.Unlock()
			}
		}()
	}
	// All four consumers are subscribed: each response started after its SUBSCRIBE succeeded.
	publishOfficial(t, b, topic, n, 64, 50)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("only %d of %d messages arrived", total, n)
	}
	time.Sleep(500 * time.Millisecond) // not a sync point: a window for a duplicate to show up
	cancel()
	wg.Wait()
	for seq, c := range count {
		if c == 0 {
			t.Fatalf("seq %d never delivered", seq)
		}
		redelivered += c - 1
	}
	for c, k := range per {
		if k == 0 {
			t.Fatalf("client %d got nothing: %v", c, per)
		}
	}
	if redelivered > 0 {
		t.Fatalf("%d messages delivered twice without a redelivery cause", redelivered)
	}
	t.Logf("Shared subscription, 4 HTTP clients: %d messages, each delivered exactly once; per client %v", n, per)
}

// TestEgressSlowClientHoldsOnlyTheReceiverQueue: a client reading one record per second
// for a minute: the bridge's memory stays flat, the broker stops sending, and another
// stream on the same bridge keeps its speed.
func TestEgressSlowClientHoldsOnlyTheReceiverQueue(t *testing.T) {
	b := broker.Get(t)
	slowTopic, fastTopic := b.Topic(t, "slow"), b.Topic(t, "fast")
	const n = 20_000
	publishOfficial(t, b, slowTopic, n, 4, 1000)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
egress:
  writeTimeout: 5m
streams:
  - name: slow
    topics: [%s]
    position: earliest
    receiverQueue: 100
  - name: fast
    topics: [%s]
    position: earliest
`, b.URL, slowTopic, fastTopic))
	// The other stream's speed before any slow client (it also warms the bridge's heap up).
	fastRates := []float64{fastStream(t, b, p, fastTopic, 20_000)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/slow", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body, recordio.BufferSize(1100))
	subStats := func() (out int64, backlog int64) {
		s := getSubscriptionStats(t, b, slowTopic, "bridge-slow")
		return s.MsgOutCounter, s.MsgBacklog
	}
	var rss []int64
	var outs []int64
	for sec := 0; sec < 60; sec++ {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("slow read %d: %v", sec, err)
		}
		// The other stream again at 35 s, while the slow one is stuck.
		if sec == 35 {
			fastRates = append(fastRates, fastStream(t, b, p, fastTopic, 20_000))
		}
		if sec%10 == 9 {
			rss = append(rss, processRSS(t, p.cmd.Process.Pid))
			o, _ := subStats()
			outs = append(outs, o)
		}
		time.Sleep(time.Second)
	}
	out, backlog := subStats()
	t.Logf("slow client, 60 records in 60 s: broker msgOut %v (then %d, backlog %d entries); bridge RSS %v MiB; the fast stream before: %.0f records/s, during: %.0f records/s (%.2f of before)",
		outs, out, backlog, mib(rss), fastRates[0], fastRates[1], fastRates[1]/fastRates[0])
	// What the broker sent is the receiver queue plus what the kernel's socket buffers
	// between the bridge and the client hold; once they are full it must stop.
	if outs[len(outs)-1] != outs[0] || out >= n {
		t.Fatalf("the broker kept sending to the slow stream: msgOutCounter %v then %d", outs, out)
	}
	// The other stream keeps its speed: the same 20 000 records, same bridge, same run,
	// at least half as fast while the slow one is stuck. The slack is for the machine (the
	// two runs are half a minute apart on shared cores, and a neighbour's burst can take
	// half of one); a stream held up by the stuck one would stall, not lose a half.
	if fastRates[1] < fastRates[0]/2 {
		t.Fatalf("the fast stream ran at %.0f records/s while the slow one was stuck, %.0f before: less than half its speed", fastRates[1], fastRates[0])
	}
	// Flat between the fast stream's runs (which grow the heap once, for their own data).
	// Buffering the slow stream's backlog would take its bytes (n records of about 1 KiB:
	// 20 MiB); the bound is a quarter of that, the slack being the Go heap's steps and the
	// scavenger's timing, which move the resident size by a few MiB on a loaded machine.
	bound := int64(n) * 1024 / 4
	for _, window := range [][]int64{rss[:3], rss[3:]} {
		if d := slices.Max(window) - slices.Min(window); d > bound {
			t.Fatalf("bridge RSS moved by %d MiB (bound %d MiB) while only the slow client read: %v MiB", d>>20, bound>>20, mib(rss))
		}
	}
}

func mib(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x >> 20
	}
	return out
}

// fastStream publishes n messages to topic and reads them through the bridge's "fast"
// stream (a fresh subscription each time), returning records per second.
func fastStream(t testing.TB, b *broker.Broker, p *bridgeProc, topic string, n int) float64 {
	t.Helper()
	publishOfficial(t, b, topic, n, 4, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/fast", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("fast stream after %d: %v", i, err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// TestEgressStreamsAChunkedMessageWhole: a 20 MiB message (the broker's limit is 5 MiB)
// published in chunks by the official client, between small ones, reaches the HTTP
// client byte for byte, bare and in the JSON envelope; the bridge writes it from the
// reassembled chunks without joining them.
func TestEgressStreamsAChunkedMessageWhole(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "chunked-egress")
	c := newOfficialClient(t, b)
	prod, err := c.CreateProducer(official.ProducerOptions{Topic: topic, EnableChunking: true, DisableBatching: true, ChunkMaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 20<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(rng.IntN(256))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, payload := range [][]byte{[]byte(`{"n":0}`), big, []byte(`{"n":2}`)} {
		if _, err := prod.Send(ctx, &official.ProducerMessage{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: out\n    topics: [%s]\n    position: earliest\n    overrides: [envelope, subscription]\n", b.URL, topic))
	for _, env := range []string{"none", "json"} {
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out?subscription=check-"+env+"&envelope="+env, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", env, resp.StatusCode)
		}
		rd := recordio.NewReader(resp.Body, recordio.MaxRecordSize(64<<20))
		for i := range 3 {
			rec, err := rd.Next()
			if err != nil {
				t.Fatalf("%s: record %d: %v", env, i, err)
			}
			if env == "json" {
				var e struct {
					Payload       json.RawMessage `json:"payload"`
					PayloadBase64 []byte          `json:"payloadBase64"`
				}
				if err := json.Unmarshal(rec, &e); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				rec = e.PayloadBase64
				if e.Payload != nil {
					rec = e.Payload
				}
			}
			want := big
			if i != 1 {
				want = []byte(fmt.Sprintf(`{"n":%d}`, i))
			}
			if !bytes.Equal(rec, want) {
				t.Errorf("%s: record %d: %d bytes, want %d (%.40q, want %.40q)", env, i, len(rec), len(want), rec, want)
			}
		}
		resp.Body.Close()
	}
}

// waitEgressStreams waits until the bridge's /readyz counts n egress streams.
func waitEgressStreams(t testing.TB, p *bridgeProc, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var r struct {
			EgressStreams *int `json:"egressStreams"`
		}
		if err := json.Unmarshal([]byte(readyzBody(p)), &r); err == nil && r.EgressStreams != nil && *r.EgressStreams == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not count %d egress streams within 30s: %s", n, readyzBody(p))
		}
		time.Sleep(20 * time.Millisecond) // polling /readyz, the condition is the sync point
	}
}

// TestEgressEndsWithStreamErrorWhenTheTopicIsDeleted: the topic of an open stream is
// deleted (auto-creation off), so the consumer cannot resubscribe, ever. The stream
// delivers what it had, then ends with the reason in its Stream-Error trailer instead of
// resubscribing for ever; a new request gets the refusal as a status before any byte.
func TestEgressEndsWithStreamErrorWhenTheTopicIsDeleted(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "egress-gone")
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/autoTopicCreation", []byte(`{"allowAutoTopicCreation":false}`))
	topic := "persistent://" + ns + "/gone"
	b.MustAdmin(t, http.MethodPut, "/admin/v2/persistent/"+ns+"/gone", nil)
	publishOfficial(t, b, topic, 1, 1, 0)
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: out\n    topics: [%s]\n    position: earliest\n", b.URL, topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if _, declared := resp.Trailer["Stream-Error"]; resp.StatusCode != 200 || !declared {
		t.Fatalf("%s, trailers declared %v", resp.Status, resp.Trailer)
	}
	rd := recordio.NewReader(resp.Body)
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	b.MustAdmin(t, http.MethodDelete, "/admin/v2/persistent/"+ns+"/gone?force=true", nil)
	if rec, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the topic was deleted: %q, %v", rec, err)
	}
	if got := resp.Trailer.Get("Stream-Error"); !strings.Contains(got, "consumer failed") {
		t.Fatalf("Stream-Error trailer %q", got)
	}
	again := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	body, _ := io.ReadAll(again.Body)
	again.Body.Close()
	if again.StatusCode == 200 {
		t.Fatalf("a new stream on the deleted topic: 200 %q", body)
	}
	t.Logf("deleted topic: the stream ended with Stream-Error %q; a new request: %s %s", resp.Trailer.Get("Stream-Error"), again.Status, body)
}

// TestEgressSaysEndOfTopicAndNothingElseDoes: a terminated topic's stream delivers what
// the topic holds and ends with Stream-End: end-of-topic; a bridge draining (SIGTERM) ends
// an idle stream cleanly without it, so a client can tell a rolling restart from the
// topic's end.
func TestEgressSaysEndOfTopicAndNothingElseDoes(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "egress-end")
	ended, idle := "persistent://"+ns+"/ended", "persistent://"+ns+"/idle"
	publishOfficial(t, b, ended, 3, 1, 0)
	b.MustAdmin(t, http.MethodPut, "/admin/v2/persistent/"+ns+"/idle", nil)
	b.MustAdmin(t, http.MethodPost, "/admin/v2/persistent/"+ns+"/ended/terminate", nil)
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: ended\n    topics: [%s]\n    position: earliest\n  - name: idle\n    topics: [%s]\n    position: earliest\n", b.URL, ended, idle))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/ended", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	n := 0
	for {
		_, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if got := resp.Trailer.Get("Stream-End"); n != 3 || got != "end-of-topic" {
		t.Fatalf("terminated topic: %d records, Stream-End %q; want 3 and end-of-topic", n, got)
	}
	idleResp := egressGet(t, ctx, p.DataURL+"/v1/streams/idle", nil)
	defer idleResp.Body.Close()
	if _, declared := idleResp.Trailer["Stream-End"]; idleResp.StatusCode != 200 || !declared {
		t.Fatalf("%s, trailers declared %v", idleResp.Status, idleResp.Trailer)
	}
	if err, _ := p.terminate(30 * time.Second); err != nil {
		t.Logf("bridge exit: %v", err)
	}
	if rec, err := recordio.NewReader(idleResp.Body).Next(); err != io.EOF {
		t.Fatalf("idle stream of a draining bridge: %q, %v; want a clean end", rec, err)
	}
	if got := idleResp.Trailer.Get("Stream-End"); got != "" {
		t.Fatalf("a draining bridge ended an idle stream with Stream-End %q", got)
	}
	t.Logf("terminated topic: 3 records then Stream-End %q; drained: a clean end without it", resp.Trailer.Get("Stream-End"))
}
