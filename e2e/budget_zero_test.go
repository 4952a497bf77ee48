package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestMemoryBudgetReturnsToZero: on the real broker, under memory.budget 1MiB, streams
// of every kind run and end — ingress records receipted and one whose client goes away
// mid-record; an ack=client stream whose messages are acknowledged, nacked, left to
// their ack timeout, dead-lettered, and whose topic is unloaded while its consumer's
// queue is charged; an ack=auto stream whose client disconnects mid-flow — and once
// they have all ended bridge_memory_budget_used_bytes on /metrics is 0 again, as is
// every user's share. A charge never released (or released twice: the bridge panics)
// shows here.
func TestMemoryBudgetReturnsToZero(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "budgetzero")
	b.CreatePartitionedTopic(t, topic, 2)
	const (
		n   = 400
		pad = 8 << 10
	)
	payloads := publishOfficial(t, b, topic, n, 4, pad)
	size := len(payloads[n-1])
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: 1MiB
pulsar:
  url: %s
egress:
  writeTimeout: 5m
routes:
  - name: in
    default: {topic: %s}
streams:
  - name: client
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    ackTimeout: 2s
    retry: {initial: 100ms, multiplier: 1.5, jitter: 0.1, max: 500ms, maxDeliveries: 3}
  - name: auto
    topics: [%s]
    subscription: budget-auto
    position: earliest
`, b.URL, topic, topic, topic))
	const used = "bridge_memory_budget_used_bytes"
	if u := metricValue(t, scrape(t, p.OpsURL), used); u != 0 {
		t.Fatalf("before any stream the budget counts %.0f bytes", u)
	}

	var wg sync.WaitGroup
	errs := make(chan string, 16)
	// Ingress: records receipted, then a client that goes away in the middle of one.
	wg.Add(1)
	go func() {
		defer wg.Done()
		st := openStream(t, h1Client, p.DataURL+"/v1/publish/in", nil)
		for i := range 50 {
			if err := st.send([]byte(fmt.Sprintf(`{"in":%d,"pad":%q}`, i, strings.Repeat("i", 4<<10)))); err != nil {
				errs <- "ingress send: " + err.Error()
				return
			}
		}
		if _, sum, err := st.finish(2 * time.Minute); err != nil || sum.Published != 50 {
			errs <- fmt.Sprintf("ingress: summary %+v, %v", sum, err)
		}
		host := strings.TrimPrefix(p.DataURL, "http://")
		cn, err := net.Dial("tcp", host)
		if err != nil {
			errs <- err.Error()
			return
		}
		body := recordio.AppendRecord(nil, []byte(`{"whole":1}`))
		fmt.Fprintf(cn, "POST /v1/publish/in HTTP/1.1\r\nHost: b\r\nContent-Type: application/recordio\r\nMessage-Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(body)+20, append(body, "100000\n{\"half\":"...))
		time.Sleep(500 * time.Millisecond)
		cn.Close() // gone mid-record
	}()

	// ack=auto: the client reads some and disconnects while the queue is full.
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/auto", nil)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			errs <- fmt.Sprintf("GET auto: %d", resp.StatusCode)
			return
		}
		rd := recordio.NewReader(resp.Body, recordio.BufferSize(size+100))
		for i := range 60 {
			if _, err := rd.Next(); err != nil {
				errs <- fmt.Sprintf("auto read %d: %v", i, err)
				return
			}
			if i%10 == 0 {
				time.Sleep(100 * time.Millisecond) // slow: the queue fills
			}
		}
	}()

	// ack=client: ack, nack, time out, dead-letter, and an unload under a charged queue.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/client", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET client: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := newTimedReader(resp.Body, recordio.BufferSize(size+100))
	rd.stalled = func() string { return budgetState(p.OpsURL) }
	pos := 0
	read := func(k int) []int {
		var got []int
		for range k {
			if _, err := rd.next(60 * time.Second); err != nil {
				t.Fatalf("client read at %d: %v", pos, err)
			}
			got = append(got, pos)
			pos++
		}
		return got
	}
	post := func(what string, ps []int) map[string]any {
		body, _ := json.Marshal(ps)
		st, m := postAck(t, p.DataURL+"/v1/streams/client/"+what, sid, "application/json", body)
		// 400 names ids that timed out meanwhile (the client read them late): the
		// others are still acknowledged or nacked.
		if st != 200 && (st != 400 || m["unknown"] == nil) {
			t.Fatalf("POST %s %v: %d %v", what, ps, st, m)
		}
		return m
	}
	post("ack", read(20))
	post("nack", read(20))
	read(20) // left to their ack timeout
	time.Sleep(3 * time.Second)
	// The topic is unloaded while the consumer's queue holds charged messages.
	b.MustAdmin(t, http.MethodPut, "/admin/v2/"+strings.Replace(topic, "://", "/", 1)+"/unload", nil)
	post("ack", read(20))
	// Nack what comes until a nack dead-letters (maxDeliveries 3).
	dead := false
	for range 200 {
		m := post("nack", read(10))
		if d, _ := m["deadLettered"].(float64); d > 0 {
			dead = true
			break
		}
	}
	t.Logf("a nack dead-lettered after %d records read", pos)
	if !dead {
		t.Fatal("no nack dead-lettered a message in 2 000 deliveries")
	}
	read(10) // held, unacknowledged, when the client goes
	cancel()
	resp.Body.Close()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	t.Logf("every stream ended")
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := scrape(t, p.OpsURL)
		u := metricValue(t, m, used)
		if u == 0 {
			for _, user := range []string{"ingress", "consumer_queues", "consumer_reserved", "egress"} {
				if v := metricValue(t, m, `bridge_memory_budget_charged_bytes{user="`+user+`"}`); v != 0 {
					t.Errorf("user %s holds %.0f bytes with nothing used", user, v)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after every stream ended the budget counts %.0f bytes: %s", u, grepLines(m, "bridge_memory_budget"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestARedeliveredUnacknowledgedMessageLeavesNoChargeBehind: an ack=client stream
// under a memory budget has written messages the client has not acknowledged yet when
// its topic is unloaded; the consumer reconnects and the broker delivers them again,
// with the same ids. The client acknowledges every id it read, and the deliveries'
// budget charge goes back to zero while the stream stays open. The first delivery of
// each such message used to stay charged until the stream ended (its entry was
// replaced by the redelivery's and never settled): a stream holding them was never
// idle again, and once its own consumer queue filled the budget it delivered nothing
// more (the hang TestMemoryBudgetReturnsToZero met).
func TestARedeliveredUnacknowledgedMessageLeavesNoChargeBehind(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "redelivered")
	const n = 30
	publishUnbatched(t, b, topic, n)
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: 1MiB
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    ackTimeout: 10m
`, b.URL, topic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", map[string]string{"Message-Accept": "application/json"})
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := newTimedReader(resp.Body)
	rd.stalled = func() string { return budgetState(p.OpsURL) }
	seen := map[string]int{}
	next := func() string {
		rec, err := rd.next(60 * time.Second)
		if err != nil {
			t.Fatalf("read after %d ids: %v", len(seen), err)
		}
		var e struct {
			MessageID string `json:"messageId"`
		}
		if err := json.Unmarshal(rec, &e); err != nil || e.MessageID == "" {
			t.Fatalf("envelope %q: %v", rec, err)
		}
		seen[e.MessageID]++
		return e.MessageID
	}
	for range n {
		next()
	}
	// Nothing acknowledged: the unload makes the broker deliver all n again.
	b.MustAdmin(t, http.MethodPut, "/admin/v2/"+strings.Replace(topic, "://", "/", 1)+"/unload", nil)
	again := 0
	for again < n {
		if seen[next()] > 1 {
			again++
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	js, _ := json.Marshal(ids)
	if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", sid, "application/json", js); st != 200 || m["acked"] != float64(len(ids)) {
		t.Fatalf("ack of the %d ids read: %d %v", len(ids), st, m)
	}
	const egressCharge = `bridge_memory_budget_charged_bytes{user="egress"}`
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := scrape(t, p.OpsURL)
		v := metricValue(t, m, egressCharge)
		if v == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("every id read (%d, each delivered twice) acknowledged, the stream still open: egress still holds %.0f bytes (%s)",
				len(ids), v, grepLines(m, "bridge_memory_budget"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestABatchAckingClientIsNotStarvedByItsOwnQueue: under memory.budget 1MiB an
// ack=client stream reads a backlog of 8 KiB messages larger than the budget and
// acknowledges every 20 records, as clients that acknowledge in batches do; its own
// consumer queue keeps the budget spent. Every record arrives without waiting for an
// ack timeout (10 min here). The stream used to take nothing while the budget was spent
// and it held unsettled deliveries, although the queued messages were charged already:
// the client waited for its 20th record and the stream for the client's acknowledgement.
func TestABatchAckingClientIsNotStarvedByItsOwnQueue(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "batchack")
	const n, batch = 300, 20
	payloads := publishOfficial(t, b, topic, n, 4, 8<<10)
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: 1MiB
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    ackTimeout: 10m
`, b.URL, topic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := newTimedReader(resp.Body, recordio.BufferSize(len(payloads[n-1])+100))
	rd.stalled = func() string { return budgetState(p.OpsURL) }
	peak := 0.0
	for pos := 0; pos < n; pos += batch {
		ps := make([]int, 0, batch)
		for i := pos; i < pos+batch; i++ {
			if _, err := rd.next(30 * time.Second); err != nil {
				t.Fatalf("record %d (acknowledging every %d): %v", i, batch, err)
			}
			ps = append(ps, i)
		}
		js, _ := json.Marshal(ps)
		if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", sid, "application/json", js); st != 200 || m["acked"] != float64(batch) {
			t.Fatalf("ack of %v: %d %v", ps, st, m)
		}
		peak = max(peak, metricValue(t, scrape(t, p.OpsURL), "bridge_memory_budget_used_bytes"))
	}
	t.Logf("%d records read and acknowledged %d at a time; budget used at most %.0f bytes at the acks", n, batch, peak)
	if peak == 0 {
		t.Fatal("the budget never counted anything: the test shows nothing")
	}
}

// timedReader reads RecordIO records with a deadline on each: a bridge that stops
// delivering fails the test (closing the body) instead of hanging it.
type timedReader struct {
	body io.Closer
	rd   *recordio.Reader
	// stalled, if set, is called when a read is late, before the body is closed (so
	// what it reads of the bridge is the stalled state), and its result is in the error.
	stalled func() string
}

func newTimedReader(body io.ReadCloser, opts ...recordio.Option) *timedReader {
	return &timedReader{body: body, rd: recordio.NewReader(body, opts...)}
}

// next returns the next record, or an error naming the wait if none came within d.
func (r *timedReader) next(d time.Duration) ([]byte, error) {
	var late atomic.Bool
	var state string
	t := time.AfterFunc(d, func() {
		late.Store(true)
		if r.stalled != nil {
			state = r.stalled()
		}
		r.body.Close()
	})
	rec, err := r.rd.Next()
	if !t.Stop() && late.Load() {
		return nil, fmt.Errorf("no record within %s (%s)", d, state)
	}
	return rec, err
}

// budgetState is the budget's figures on /metrics, fetched without a testing.T (from
// a timer's goroutine).
func budgetState(opsURL string) string {
	resp, err := http.Get(opsURL + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return grepLines(string(b), "bridge_memory_budget") + "; " + grepLines(string(b), "bridge_egress_buffered")
}

// TestMemoryBudgetReturnsToZeroAfterChunkedMessages: the same on the real broker with
// chunked messages (600 KiB in 64 KiB chunks, under memory.budget 1MiB): an ack=client
// stream on an exclusive subscription reads some, nacks one (the whole queue is
// redelivered), has its topic unloaded while chunks are being reassembled, acknowledges
// some and goes; then nothing is left charged.
func TestMemoryBudgetReturnsToZeroAfterChunkedMessages(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "budgetchunks")
	prod, err := newOfficialClient(t, b).CreateProducer(official.ProducerOptions{Topic: topic, EnableChunking: true, DisableBatching: true, ChunkMaxMessageSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 12, 600 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range n {
		payload := []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("c", size)))
		if _, err := prod.Send(ctx, &official.ProducerMessage{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: 1MiB
pulsar:
  url: %s
egress:
  writeTimeout: 5m
streams:
  - name: out
    topics: [%s]
    position: earliest
    ack: client
    ackTimeout: 3s
`, b.URL, topic))
	const used = "bridge_memory_budget_used_bytes"
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	resp := egressGet(t, sctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body, recordio.MaxRecordSize(4<<20))
	pos := 0
	next := func() int {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		pos++
		return pos - 1
	}
	post := func(what string, ps ...int) {
		body, _ := json.Marshal(ps)
		// A 503 lists in notAcked what the broker did not confirm (its consumer was
		// closed by the unload and is resubscribing): posted again, as the contract says.
		for deadline := time.Now().Add(30 * time.Second); ; {
			st, m := postAck(t, p.DataURL+"/v1/streams/out/"+what, sid, "application/json", body)
			if st == http.StatusServiceUnavailable && m["notAcked"] != nil && time.Now().Before(deadline) {
				body, _ = json.Marshal(m["notAcked"])
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if st != 200 && (st != 400 || m["unknown"] == nil) {
				t.Fatalf("POST %s %v: %d %v", what, ps, st, m)
			}
			return
		}
	}
	post("ack", next())
	post("nack", next()) // exclusive: the queue is dropped and redelivered
	next()
	b.MustAdmin(t, http.MethodPut, "/admin/v2/"+strings.Replace(topic, "://", "/", 1)+"/unload", nil)
	for range 3 {
		post("ack", next())
	}
	next() // held when the client goes
	stop()
	resp.Body.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := scrape(t, p.OpsURL)
		u := metricValue(t, m, used)
		if u == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the stream ended the budget counts %.0f bytes: %s", u, grepLines(m, "bridge_memory_budget"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAQuietEgressStreamLeavesTheBudgetToIngress: under memory.budget 1MiB an egress
// client reads a topic's whole backlog of 8 KiB messages and stays, the topic quiet. Its
// consumer still has permits out at the broker, reserved from the budget; that
// reservation used to stay for good (most of the budget), and a 700 KiB record posted
// to ingress then waited for room that never came. It is published now.
func TestAQuietEgressStreamLeavesTheBudgetToIngress(t *testing.T) {
	b := broker.Get(t)
	quiet, in := b.Topic(t, "quiet"), b.Topic(t, "busy")
	const n = 300
	prod, err := newOfficialClient(t, b).CreateProducer(official.ProducerOptions{Topic: quiet, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("q", 8<<10))
	for range n {
		if _, err := prod.Send(context.Background(), &official.ProducerMessage{Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: 1MiB
pulsar:
  url: %s
routes:
  - name: in
    default: {topic: %s}
streams:
  - name: quiet
    topics: [%s]
    position: earliest
`, b.URL, in, quiet))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/quiet", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	rd := recordio.NewReader(resp.Body, recordio.BufferSize(len(payload)+100))
	for i := range n {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	t.Logf("backlog read, the topic quiet: %s", grepLines(scrape(t, p.OpsURL), "bridge_memory_budget"))
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/in", nil)
	if err := st.send([]byte(fmt.Sprintf(`{"big":%q}`, strings.Repeat("b", 700<<10)))); err != nil {
		t.Fatal(err)
	}
	rs, sum, err := st.finish(60 * time.Second)
	if err != nil || len(rs) != 1 || rs[0].Status != 200 {
		t.Fatalf("a 700 KiB record next to a quiet egress stream: %+v, summary %+v, %v (%s)", rs, sum, err, grepLines(scrape(t, p.OpsURL), "bridge_memory_budget"))
	}
}
