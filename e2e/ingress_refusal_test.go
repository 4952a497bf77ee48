package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestIngressRefusalReachesAClientStillSending: a scheduler streams an endless body and
// reads the response as it comes. When the bridge refuses the request (429, 404, 415),
// or ends a one-answer stream early (400 for a malformed length prefix), the answer must
// reach the client while its body is still open: the server must not first wait to
// read (and drop) what is left of a body that never ends. Before the fix net/http held
// every such answer until the client had sent another 256 KiB or closed its body.
func TestIngressRefusalReachesAClientStillSending(t *testing.T) {
	b := broker.Get(t)
	topic := broker.Name("refused")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  maxStreams: 1
  idleTimeout: 5m
routes:
  - name: r
    contentTypes: [application/json]
    default:
      topic: %s
`, b.URL, topic))
	url := p.DataURL + "/v1/publish/r"

	// The one stream the limit allows, kept open for the 429 case.
	hold := openStream(t, h1Client, url, nil)
	if err := hold.send(rec(0)); err != nil {
		t.Fatal(err)
	}
	if r := <-hold.receipts; r.Status != 200 {
		t.Fatalf("first stream: %+v", r)
	}

	// open starts a POST whose body stays open after first, and returns the response
	// (or fails when none comes within the deadline).
	open := func(t *testing.T, c *http.Client, url string, header map[string]string, first []byte) (*http.Response, *io.PipeWriter) {
		t.Helper()
		pr, pw := io.Pipe()
		req, err := http.NewRequest(http.MethodPost, url, pr)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		respc, errc := make(chan *http.Response, 1), make(chan error, 1)
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				errc <- err
				return
			}
			respc <- resp
		}()
		go func() { _, _ = pw.Write(first) }()
		select {
		case resp := <-respc:
			return resp, pw
		case err := <-errc:
			pw.Close()
			t.Fatal(err)
		case <-time.After(15 * time.Second):
			pw.CloseWithError(fmt.Errorf("test gave up"))
			t.Fatal("no answer within 15s while the request body is still open")
		}
		return nil, nil
	}

	one := recordio.AppendRecord(nil, rec(1))
	cases := []struct {
		name   string
		path   string
		header map[string]string
		body   []byte
		status int
		msg    string
	}{
		{"too many streams", "/v1/publish/r", streamHeaders, one, 429, "ingress.maxStreams is 1"},
		{"unknown route", "/v1/publish/nope", streamHeaders, one, 404, "no route"},
		{"record type not allowed", "/v1/publish/r", with(streamHeaders, "Message-Content-Type", "text/plain"), one, 415, "text/plain"},
	}
	for _, cl := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", h1Client}, {"h2c", h2cClient}} {
		for _, tc := range cases {
			t.Run(cl.name+"/"+tc.name, func(t *testing.T) {
				resp, pw := open(t, cl.c, p.DataURL+tc.path, tc.header, tc.body)
				defer pw.Close()
				defer resp.Body.Close()
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
				if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.msg) {
					t.Fatalf("%d %s; want %d with %q", resp.StatusCode, body, tc.status, tc.msg)
				}
				if tc.status == 429 && resp.Header.Get("Retry-After") == "" {
					t.Fatalf("429 without Retry-After: %v", resp.Header)
				}
			})
		}
	}
	if _, sum, err := hold.finish(30 * time.Second); err != nil || sum.Status != 200 || sum.Published != 1 {
		t.Fatalf("first stream's summary %+v, %v", sum, err)
	}

	// One answer (no streamed receipts): a malformed length prefix ends the stream; the
	// answer names it while the client's body is still open, and the record before it is
	// in Pulsar.
	for _, cl := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", h1Client}, {"h2c", h2cClient}} {
		t.Run(cl.name+"/one answer, malformed length", func(t *testing.T) {
			body := append(recordio.AppendRecord(nil, rec(2)), "12x\n"...)
			resp, pw := open(t, cl.c, url, with(streamHeaders, "Accept", "application/json", "Message-Accept", ""), body)
			defer pw.Close()
			defer resp.Body.Close()
			out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			var sum receipt
			if err := json.Unmarshal(out, &sum); err != nil || resp.StatusCode != 400 || sum.Published != 1 ||
				!strings.Contains(sum.Error, "bad record header") {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
		})
	}
	// Requests pipelined on one HTTP/1.1 connection, each with its whole body, one of
	// them refused: every one is answered, in order; the refusal does not cost the
	// connection the requests queued behind it.
	t.Run("HTTP/1.1/pipelined, one refused", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.DataURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		var reqs []byte
		for i, ct := range []string{"application/json", "text/plain", "application/json"} {
			body := rec(3 + i)
			reqs = fmt.Appendf(reqs, "POST /v1/publish/r HTTP/1.1\r\nHost: bridge\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", ct, len(body), body)
			reqs = fmt.Appendf(reqs, "POST /v1/publish/r HTTP/1.1\r\nHost: bridge\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", ct, len(body), body)
		}
		if _, err := conn.Write(reqs); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		for i, want := range []int{200, 200, 415, 415, 200, 200} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != want {
				t.Fatalf("answer %d: %d %s %v; want %d", i, resp.StatusCode, body, err, want)
			}
		}
	})

	got := readTopic(t, newOfficialClient(t, b), "persistent://public/default/"+topic, 7)
	for i, want := range []int{0, 2, 2, 3, 3, 5, 5} {
		if got[i] != string(rec(want)) {
			t.Fatalf("message %d is %q, want %q", i, got[i], rec(want))
		}
	}
}
