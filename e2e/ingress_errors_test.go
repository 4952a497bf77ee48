package e2e

import (
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

// readTopic reads exactly n messages from topic (from the earliest) with the official
// client and checks that nothing follows them.
func readTopic(t testing.TB, c official.Client, topic string, n int) []string {
	t.Helper()
	cons := officialSubscribe(t, c, topic)
	var out []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(out) < n {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%s: %d of %d messages, then %v", topic, len(out), n, err)
		}
		out = append(out, string(msg.Payload()))
		_ = cons.Ack(msg)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if msg, err := cons.Receive(ctx2); err == nil {
		t.Fatalf("%s: an extra message %q after the %d expected", topic, msg.Payload(), n)
	}
	return out
}

func rec(i int) []byte { return []byte(fmt.Sprintf(`{"type":"UPDATE","n":%d}`, i)) }

var streamHeaders = map[string]string{
	"Content-Type": "application/recordio", "Message-Content-Type": "application/json",
	"Accept": "application/recordio", "Message-Accept": "application/json",
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// decodeStreamed splits a streamed ingress response into receipts and the summary.
func decodeStreamed(t testing.TB, body []byte) ([]receipt, receipt) {
	t.Helper()
	rd := recordio.NewReader(strings.NewReader(string(body)))
	var out []receipt
	var sum receipt
	for {
		b, err := rd.Next()
		if err != nil {
			break
		}
		var r receipt
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("record %q: %v", b, err)
		}
		if r.Summary {
			sum = r
		} else {
			out = append(out, r)
		}
	}
	if !sum.Summary {
		t.Fatalf("no summary in %q", body)
	}
	return out, sum
}

// TestIngressErrorsAreClearAndLoseNothingBefore covers every error of the ingress
// contract: the status, a message naming the problem, and the records that came before
// the error being in Pulsar.
func TestIngressErrorsAreClearAndLoseNothingBefore(t *testing.T) {
	b := broker.Get(t)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  maxRecordBytes: 2KiB
  maxStreams: 3
  idleTimeout: 1s
routes:
  - name: err
    contentTypes: [application/json]
    namespaces: [public/default]
    rules:
      - match: {json: {type: BAD}}
        topic: "bad-{json:missing}"
    default:
      topic: "{header:X-Topic}"
`, b.URL))
	c := newOfficialClient(t, b)
	url := p.DataURL + "/v1/publish/err"

	t.Run("refused before the stream starts", func(t *testing.T) {
		cases := []struct {
			name   string
			path   string
			header map[string]string
			body   string
			status int
			msg    string
		}{
			{"unknown route", "/v1/publish/nope", streamHeaders, "", 404, `no route for "/v1/publish/nope"`},
			{"no content type", "/v1/publish/err", with(streamHeaders, "Content-Type", ""), "", 400, "the request has no Content-Type"},
			{"recordio without message type", "/v1/publish/err", with(streamHeaders, "Message-Content-Type", ""), "", 400,
				"needs a Message-Content-Type header"},
			{"unknown content type", "/v1/publish/err", with(streamHeaders, "Content-Type", "text/plain"), "", 415, `Content-Type "text/plain"`},
			{"record type the route does not allow", "/v1/publish/err", with(streamHeaders, "Message-Content-Type", "application/x-protobuf"), "", 415,
				`Message-Content-Type "application/x-protobuf": allowed: application/json`},
			{"message type on a single record", "/v1/publish/err", with(streamHeaders, "Content-Type", "application/json"), "{}", 415,
				"Message-Content-Type"},
		}
		for _, tc := range cases {
			status, _, body := postOne(t, p.DataURL+tc.path, tc.header, []byte(tc.body))
			var e struct {
				Status int
				Error  string
			}
			_ = json.Unmarshal(body, &e)
			if status != tc.status || e.Status != tc.status || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("%s: %d %s; want %d with %q", tc.name, status, body, tc.status, tc.msg)
			}
		}
	})

	t.Run("malformed length prefix", func(t *testing.T) {
		topic := broker.Name("framing")
		var body []byte
		for i := range 3 {
			body = recordio.AppendRecord(body, rec(i))
		}
		badAt := len(body)
		body = append(body, "12x\n{}"...)
		for _, streamed := range []bool{true, false} {
			h := with(streamHeaders, "X-Topic", topic)
			if !streamed {
				h = with(h, "Accept", "application/json", "Message-Accept", "")
			}
			status, _, out := postOne(t, url, h, body)
			var sum receipt
			var rs []receipt
			if streamed {
				rs, sum = decodeStreamed(t, out)
			} else {
				_ = json.Unmarshal(out, &sum)
			}
			if (streamed && status != 200) || (!streamed && status != 400) || sum.Status != 400 || sum.Records != 3 || sum.Published != 3 ||
				sum.Offset == nil || *sum.Offset != int64(badAt) || !strings.Contains(sum.Error, `bad record header: byte 'x' at position 2`) ||
				!strings.Contains(sum.Error, fmt.Sprintf("byte offset %d", badAt)) || (streamed && len(rs) != 3) {
				t.Fatalf("streamed=%v: status %d, body %s", streamed, status, out)
			}
		}
		got := readTopic(t, c, "persistent://public/default/"+topic, 6)
		for i, g := range got {
			if g != string(rec(i%3)) {
				t.Fatalf("message %d is %q", i, g)
			}
		}
		t.Logf("framing error at byte %d: 400 naming the offset; the 3 records before it are in Pulsar (twice: streamed and one-answer requests)", badAt)
	})

	t.Run("record over maxRecordBytes and unroutable record", func(t *testing.T) {
		topic := broker.Name("limits")
		big := []byte(`{"type":"UPDATE","pad":"` + strings.Repeat("x", 3000) + `"}`)
		var body []byte
		for _, r := range [][]byte{rec(0), big, rec(2), []byte(`{"type":"BAD"}`), rec(4)} {
			body = recordio.AppendRecord(body, r)
		}
		status, _, out := postOne(t, url, with(streamHeaders, "X-Topic", topic), body)
		rs, sum := decodeStreamed(t, out)
		wantStatus := []int{200, 413, 200, 422, 200}
		if status != 200 || len(rs) != 5 || sum.Status != 413 || sum.Published != 3 || sum.Failed != 2 {
			t.Fatalf("status %d: %s", status, out)
		}
		for i, r := range rs {
			if r.Seq != int64(i) || r.Status != wantStatus[i] {
				t.Fatalf("receipt %d: %+v", i, r)
			}
		}
		if !strings.Contains(rs[1].Error, fmt.Sprintf("record of %d bytes exceeds", len(big))) || !strings.Contains(rs[1].Error, "exceeds ingress.maxRecordBytes (2048)") ||
			!strings.Contains(rs[3].Error, "route err, rule 0: topic bad-{json:missing}: the record has no JSON field missing") {
			t.Fatalf("failure messages: %q / %q", rs[1].Error, rs[3].Error)
		}
		// The one-answer form says the same with the failures listed.
		status, _, out = postOne(t, url, with(streamHeaders, "X-Topic", topic, "Accept", "application/json", "Message-Accept", ""), body)
		var ans struct {
			receipt
			Failures []receipt
			First    string `json:"firstMessageId"`
			Last     string `json:"lastMessageId"`
		}
		if err := json.Unmarshal(out, &ans); err != nil || status != 413 || ans.Published != 3 || len(ans.Failures) != 2 ||
			ans.Failures[0].Seq != 1 || ans.Failures[1].Status != 422 || ans.First == "" || ans.Last == "" {
			t.Fatalf("one answer: %d %s", status, out)
		}
		got := readTopic(t, c, "persistent://public/default/"+topic, 6)
		for i, g := range got {
			if want := string(rec([]int{0, 2, 4}[i%3])); g != want {
				t.Fatalf("message %d is %q, want %q", i, g, want)
			}
		}
	})

	t.Run("too many streams", func(t *testing.T) {
		topic := broker.Name("busy")
		var open []*ingressStream
		for i := range 3 {
			st := openStream(t, h1Client, url, map[string]string{"X-Topic": topic})
			if err := st.send(rec(i)); err != nil {
				t.Fatal(err)
			}
			if r := <-st.receipts; r.Status != 200 {
				t.Fatalf("stream %d: %+v", i, r)
			}
			open = append(open, st)
		}
		status, h, body := postOne(t, url, with(streamHeaders, "X-Topic", topic), recordio.AppendRecord(nil, rec(9)))
		if status != 429 || h.Get("Retry-After") == "" || !strings.Contains(string(body), "too many concurrent streams (ingress.maxStreams is 3)") {
			t.Fatalf("4th stream: %d %v %s", status, h, body)
		}
		for _, st := range open {
			if _, sum, err := st.finish(10 * time.Second); err != nil || sum.Status != 200 || sum.Published != 1 {
				t.Fatalf("summary %+v, %v", sum, err)
			}
		}
		readTopic(t, c, "persistent://public/default/"+topic, 3)
	})

	t.Run("idle stream", func(t *testing.T) {
		topic := broker.Name("idle")
		st := openStream(t, h1Client, url, map[string]string{"X-Topic": topic})
		if err := st.send(rec(0), rec(1)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rs, sum, err := st.drain(10 * time.Second) // the body stays open and silent
		st.pw.Close()
		if err != nil || len(rs) != 2 || sum.Status != http.StatusRequestTimeout || sum.Published != 2 || !strings.Contains(sum.Error, "idle") {
			t.Fatalf("receipts %+v summary %+v err %v", rs, sum, err)
		}
		t.Logf("silent stream ended after %s with %d: %s", time.Since(start).Round(time.Millisecond), sum.Status, sum.Error)
		readTopic(t, c, "persistent://public/default/"+topic, 2)
	})
}

// TestIngressAnswers503WhileTheBrokerIsDown kills the broker in the middle of a stream:
// records receipted before are in Pulsar after it comes back, the stream ends with 503
// and a retry hint, and a one-answer request gets 503 with Retry-After.
func TestIngressAnswers503WhileTheBrokerIsDown(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("the broker was not started by this test run")
	}
	topic := b.Topic(t, "down")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
  operationTimeout: 3s
ingress:
  publishTimeout: 3s
routes:
  - name: r
    default: {topic: %s}
`, b.URL, topic))
	url := p.DataURL + "/v1/publish/r"
	st := openStream(t, h1Client, url, nil)
	for i := range 20 {
		if err := st.send(rec(i)); err != nil {
			t.Fatal(err)
		}
		if r := <-st.receipts; r.Status != 200 || r.Seq != int64(i) {
			t.Fatalf("receipt %+v", r)
		}
	}
	b.Kill(t)
	restarted := false
	defer func() {
		if !restarted {
			b.StartAgain(t)
		}
	}()
	for i := 20; i < 25; i++ {
		_ = st.send(rec(i))
	}
	rs, sum, err := st.finish(time.Minute)
	if err != nil || sum.Status != 503 || sum.RetryAfter <= 0 || sum.Published != 20 || sum.Failed != int64(len(rs)) || len(rs) == 0 || rs[0].Status != 503 {
		t.Fatalf("after the kill: receipts %+v summary %+v err %v", rs, sum, err)
	}
	t.Logf("broker killed: the stream ended with %d (%s), retryAfter %ds", sum.Status, sum.Error, sum.RetryAfter)
	status, h, body := postOne(t, url, map[string]string{"Content-Type": "application/json"}, rec(99))
	if status != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("one answer while down: %d %v %s", status, h, body)
	}
	if got := p.readyz(t); got["ready"] != false {
		t.Fatalf("readyz while the broker is down: %v", got)
	}
	b.StartAgain(t)
	restarted = true
	// Ready again once the broker is back: /readyz checks the handshake on each call.
	deadline := time.Now().Add(30 * time.Second)
	for p.readyz(t)["ready"] != true {
		if time.Now().After(deadline) {
			t.Fatalf("readyz after the restart: %v", p.readyz(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	c := newOfficialClient(t, b)
	got := readTopic(t, c, topic, 20)
	for i, g := range got {
		if g != string(rec(i)) {
			t.Fatalf("message %d is %q", i, g)
		}
	}
	t.Log("the 20 receipted records are in Pulsar after the restart")
}
