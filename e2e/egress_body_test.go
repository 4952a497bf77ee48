package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// TestEgressRequestWithABodyThatNeverComes: a GET of a stream that announces a body and
// never sends it, and an /ack POST likewise, are answered (400, 404) instead of waiting
// for that body without a deadline. Before, net/http waited to drop the body before the
// GET's first byte, with the exclusive subscription already taken: every other client
// got 409 for as long as the connection stayed open.
func TestEgressRequestWithABodyThatNeverComes(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "getbody")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    ack: client
    envelope: json
`, b.URL, topic))
	host := strings.TrimPrefix(p.DataURL, "http://")
	ask := func(t *testing.T, req string) *http.Response {
		t.Helper()
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer while the announced body does not come: %v", err)
		}
		return resp
	}
	t.Run("GET", func(t *testing.T) {
		resp := ask(t, "GET /v1/streams/out HTTP/1.1\r\nHost: bridge\r\nAccept: application/recordio\r\nContent-Length: 10\r\n\r\n")
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != 400 || !strings.Contains(string(body), "body") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		// The subscription is free for the next client.
		next := ask(t, "GET /v1/streams/out HTTP/1.1\r\nHost: bridge\r\nAccept: application/recordio\r\n\r\n")
		if next.StatusCode != 200 {
			body, _ := io.ReadAll(io.LimitReader(next.Body, 4096))
			t.Fatalf("the next client: %d %s", next.StatusCode, body)
		}
	})
	t.Run("ack", func(t *testing.T) {
		resp := ask(t, "POST /v1/streams/out/ack HTTP/1.1\r\nHost: bridge\r\nStream-Id: nope\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != 409 || !strings.Contains(string(body), "is open on this bridge process") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	// An /ack to an open stream whose body stops after its first bytes is answered 408
	// once the body's 30 s are up, its connection closed; before, readIDs waited for the
	// rest with no deadline, holding the handler and the connection for good.
	t.Run("ack of an open stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		get := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
		defer get.Body.Close()
		if get.StatusCode != 200 {
			t.Fatalf("GET: %d", get.StatusCode)
		}
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(90 * time.Second)) // generous: a missing answer fails
		fmt.Fprintf(conn, "POST /v1/streams/out/ack HTTP/1.1\r\nHost: bridge\r\nStream-Id: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[\"1:2", get.Header.Get("Stream-Id"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer while the rest of the /ack body does not come: %v", err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("%d (close %v) %s; want 408 and the connection closed", resp.StatusCode, resp.Close, body)
		}
	})
}

// TestAnyRequestWithABodyThatNeverComesIsAnswered: requests neither ingress nor egress
// serves (another method: 405) and requests to the operations listener, announcing a body
// they never send, are answered and their connection closed, instead of being held for
// as long as the client keeps it open (past every server timeout).
func TestAnyRequestWithABodyThatNeverComesIsAnswered(t *testing.T) {
	b := broker.Get(t)
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n", b.URL))
	for _, tc := range []struct {
		name, url, req string
		status         int
	}{
		{"PUT on the data listener", p.DataURL, "PUT /v1/publish/r HTTP/1.1\r\nHost: bridge\r\nContent-Length: 10\r\n\r\n", 405},
		{"chunked DELETE on the data listener", p.DataURL, "DELETE /x HTTP/1.1\r\nHost: bridge\r\nTransfer-Encoding: chunked\r\n\r\n", 405},
		{"healthz", p.OpsURL, "GET /healthz HTTP/1.1\r\nHost: bridge\r\nContent-Length: 10\r\n\r\n", 200},
		{"unknown ops path", p.OpsURL, "POST /nope HTTP/1.1\r\nHost: bridge\r\nContent-Length: 10\r\n\r\n", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(tc.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer while the announced body does not come: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("%d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}
