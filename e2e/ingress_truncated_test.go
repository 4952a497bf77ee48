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

// TestIngressBodyEndingBeforeItsLength: a client announces a Content-Length, sends one
// record and half of the next, then closes its side of the connection and reads. The
// record sent whole is published and receipted; the answer is 400 naming the early end
// of the body, not 499 "the client went away" (the client is still there, reading).
func TestIngressBodyEndingBeforeItsLength(t *testing.T) {
	b := broker.Get(t)
	topic := broker.Name("truncated")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: r
    default: {topic: %s}
`, b.URL, topic))
	body := append(recordio.AppendRecord(nil, rec(0)), "20\n{\"type\":"...)
	for _, streamed := range []bool{true, false} {
		t.Run(fmt.Sprintf("streamed=%v", streamed), func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(p.DataURL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			accept := "application/recordio"
			if !streamed {
				accept = "application/json"
			}
			fmt.Fprintf(conn, "POST /v1/publish/r HTTP/1.1\r\nHost: bridge\r\nContent-Type: application/recordio\r\n"+
				"Message-Content-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n", accept, len(body)+100)
			if _, err := conn.Write(body); err != nil {
				t.Fatal(err)
			}
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("%v after %q", err, out)
			}
			var rs []receipt
			var sum receipt
			if streamed {
				rs, sum = decodeStreamed(t, out)
			} else if err := json.Unmarshal(out, &sum); err != nil {
				t.Fatalf("%v: %q", err, out)
			}
			if sum.Status != 400 || sum.Published != 1 || !strings.Contains(sum.Error, "ended early") ||
				(streamed && (resp.StatusCode != 200 || len(rs) != 1 || rs[0].Status != 200)) || (!streamed && resp.StatusCode != 400) {
				t.Fatalf("status %d, receipts %+v, summary %+v", resp.StatusCode, rs, sum)
			}
		})
	}
	got := readTopic(t, newOfficialClient(t, b), "persistent://public/default/"+topic, 2)
	for i, g := range got {
		if g != string(rec(0)) {
			t.Fatalf("message %d is %q", i, g)
		}
	}
}
