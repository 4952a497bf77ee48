package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

func postAck(t testing.TB, url, streamID, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if streamID != "" {
		req.Header.Set("Stream-Id", streamID)
	}
	resp, err := h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestEgressClientAcks: ack=client with the JSON envelope: acknowledged messages are
// gone, unknown and foreign ids are refused, and what is not acknowledged within the
// ack timeout comes back, marked as redelivered.
func TestEgressClientAcks(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "acks")
	publishUnbatched(t, b, topic, 10)
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
    ackTimeout: 2s
    overrides: [subscription]
  - name: other
    topics: [%s]
    position: earliest
`, b.URL, topic, topic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", map[string]string{"Message-Accept": "application/json"})
	defer resp.Body.Close()
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	type env struct {
		MessageID       string `json:"messageId"`
		Key             string
		Properties      map[string]string
		PublishTime     string `json:"publishTime"`
		RedeliveryCount int    `json:"redeliveryCount"`
		Payload         struct{ Seq int }
	}
	next := func() env {
		rec, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		var e env
		if err := json.Unmarshal(rec, &e); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
		return e
	}
	var ids []string
	for i := range 10 {
		e := next()
		if e.Payload.Seq != i || e.Key != "k00" || e.Properties["i"] != fmt.Sprint(i) || e.PublishTime == "" || e.RedeliveryCount != 0 {
			t.Fatalf("envelope %d: %+v", i, e)
		}
		ids = append(ids, e.MessageID)
	}
	ackURL := p.DataURL + "/v1/streams/out/ack"
	// Acks as RecordIO (5 ids) and as a JSON array (3 ids); 2 stay unacknowledged.
	var rio []byte
	for _, id := range ids[:5] {
		rio = recordio.AppendRecord(rio, []byte(id))
	}
	if st, m := postAck(t, ackURL, sid, "application/recordio", rio); st != 200 || m["acked"] != float64(5) {
		t.Fatalf("recordio ack: %d %v", st, m)
	}
	js, _ := json.Marshal(ids[5:8])
	if st, m := postAck(t, ackURL, sid, "application/json", js); st != 200 || m["acked"] != float64(3) {
		t.Fatalf("json ack: %d %v", st, m)
	}
	// Refusals: an id acked already, an id never delivered, no Stream-Id, another stream's Stream-Id.
	js, _ = json.Marshal([]string{ids[0], "999:1:-1:-1"})
	if st, m := postAck(t, ackURL, sid, "application/json", js); st != 400 || m["acked"] != float64(0) || len(m["unknown"].([]any)) != 2 {
		t.Fatalf("unknown ids: %d %v", st, m)
	}
	if st, m := postAck(t, ackURL, "", "application/json", []byte("[]")); st != 400 || !strings.Contains(m["error"].(string), "Stream-Id") {
		t.Fatalf("no Stream-Id: %d %v", st, m)
	}
	other := egressGet(t, ctx, p.DataURL+"/v1/streams/other", nil)
	defer other.Body.Close()
	if st, m := postAck(t, p.DataURL+"/v1/streams/other/ack", other.Header.Get("Stream-Id"), "application/json", []byte(`["`+ids[8]+`"]`)); st != 409 {
		t.Fatalf("ack on an ack=auto stream: %d %v", st, m)
	}
	if st, m := postAck(t, ackURL, other.Header.Get("Stream-Id"), "application/json", []byte(`["`+ids[8]+`"]`)); st != 404 {
		t.Fatalf("a foreign Stream-Id: %d %v", st, m)
	}
	// The two unacknowledged messages come back after the ack timeout (2 s) and the
	// redelivery delay.
	start := time.Now()
	back := map[int]int{}
	for len(back) < 2 {
		e := next()
		if e.RedeliveryCount < 1 || (e.Payload.Seq != 8 && e.Payload.Seq != 9) {
			t.Fatalf("after the timeout: %+v", e)
		}
		back[e.Payload.Seq] = e.RedeliveryCount
	}
	t.Logf("8 acked (RecordIO and JSON), unknown/foreign/missing ids refused; seq 8 and 9 redelivered %s after the ack timeout started (redeliveryCount %v)",
		time.Since(start).Round(100*time.Millisecond), back)
}

// publishUnbatched publishes n messages, one per entry, so a redelivery brings back
// exactly the messages asked for (batches come back whole without batch-index acks).
func publishUnbatched(t testing.TB, b *broker.Broker, topic string, n int) {
	t.Helper()
	c := newOfficialClient(t, b)
	p, err := c.CreateProducer(official.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		if _, err := p.Send(context.Background(), &official.ProducerMessage{Payload: egressPayload("k00", i, 10), Key: "k00",
			Properties: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEgressStuckClientIsDisconnectedAndItsMessagesRedelivered: a client that stops
// reading (ack=client, it never acknowledges) is cut off after egress.writeTimeout; a new
// client then gets every message. (With ack=auto, what was flushed into the socket before
// the client got stuck counts as delivered: at-least-once to the socket.)
func TestEgressStuckClientIsDisconnectedAndItsMessagesRedelivered(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "stuck")
	const n = 5000
	publishOfficial(t, b, topic, n, 1, 4000) // ~20 MB: more than the socket buffers hold
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
egress:
  writeTimeout: 2s
streams:
  - name: out
    topics: [%s]
    position: earliest
    receiverQueue: 50
    ack: client
    envelope: json
    maxUnacked: 10000
`, b.URL, topic))
	// A raw connection that sends the request and never reads.
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.DataURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/streams/out HTTP/1.1\r\nHost: bridge\r\nAccept: application/recordio\r\n\r\n")
	start := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if !strings.Contains(readyzBody(p), "egressStreams\":1") && time.Since(start) > 500*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck client was not disconnected within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cut := time.Since(start)
	// A new client reads everything the stuck one never consumed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", map[string]string{"Message-Accept": "application/json"})
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body, recordio.MaxRecordSize(1<<20))
	seen := map[int]bool{}
	var ids []string
	for len(seen) < n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("%d of %d: %v", len(seen), n, err)
		}
		var e struct {
			MessageID string `json:"messageId"`
			Payload   egressMsg
		}
		_ = json.Unmarshal(rec, &e)
		seen[e.Payload.Seq] = true
		if ids = append(ids, e.MessageID); len(ids) == 200 {
			body, _ := json.Marshal(ids)
			if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", resp.Header.Get("Stream-Id"), "application/json", body); st != 200 {
				t.Fatalf("ack: %d %v", st, m)
			}
			ids = ids[:0]
		}
	}
	t.Logf("stuck client cut off %s after it stopped reading (writeTimeout 2s); a new client then read all %d messages", cut.Round(100*time.Millisecond), n)
}

func readyzBody(p *bridgeProc) string {
	resp, err := http.Get(p.OpsURL + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return buf.String()
}

// TestEgressEndsCleanlyWhenTheTopicIsTerminated: once the topic is terminated and
// everything delivered, the response ends normally.
func TestEgressEndsCleanlyWhenTheTopicIsTerminated(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "terminated")
	publishOfficial(t, b, topic, 100, 1, 10)
	b.MustAdmin(t, http.MethodPost, "/admin/v2/"+strings.Replace(topic, "://", "/", 1)+"/terminate", nil)
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: out\n    topics: [%s]\n    position: earliest\n", b.URL, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	got := 0
	for {
		_, err := rd.Next()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("after %d records: %v", got, err)
			}
			break
		}
		got++
	}
	if got != 100 {
		t.Fatalf("%d records before the end", got)
	}
}

// TestEgressRefusals: 404, 406, 400 for a query the stream does not allow, 409 for a
// second consumer on an Exclusive subscription.
func TestEgressRefusals(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "refusals")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nstreams:\n  - name: out\n    topics: [%s]\n    overrides: [envelope]\n", b.URL, topic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	get := func(path string, h map[string]string) (int, string) {
		resp := egressGet(t, ctx, p.DataURL+path, h)
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			return 200, ""
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.String()
	}
	first := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer first.Body.Close()
	cases := []struct {
		path   string
		h      map[string]string
		status int
		msg    string
	}{
		{"/v1/streams/nope", nil, 404, `no stream at \"/v1/streams/nope\"`},
		{"/v1/streams/out", map[string]string{"Accept": "application/json"}, 406, "offered: application/recordio"},
		{"/v1/streams/out", map[string]string{"Message-Accept": "application/x-protobuf"}, 406, "Message-Accept"},
		{"/v1/streams/out?position=earliest", nil, 400, "does not let clients choose position"},
		{"/v1/streams/out?envelope=xml", nil, 400, `envelope=\"xml\" is not one of none, json`},
		{"/v1/streams/out?colour=blue", nil, 400, `unknown query parameter \"colour\"`},
		{"/v1/streams/out", nil, 409, "already has its consumer"},
	}
	for _, c := range cases {
		st, body := get(c.path, c.h)
		if st != c.status || !strings.Contains(body, c.msg) {
			t.Errorf("GET %s %v: %d %s; want %d with %q", c.path, c.h, st, body, c.status, c.msg)
		}
	}
}
