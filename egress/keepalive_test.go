package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
)

// TestAKeptAliveConnectionServesTheNextRequestAfterADroppedBody: a client that keeps its
// connection sends a /nack whose body httpreply.DropBody reads to its end, and whose
// dead-lettering outlasts its grace; then a refused GET with a body; each time the
// next request on the same connection must start live. A read deadline left on the
// connection after the body's end fails net/http's background read, which cancels the
// connection's context: every later request on it would start cancelled.
func TestAKeptAliveConnectionServesTheNextRequestAfterADroppedBody(t *testing.T) {
	f := &slowDLQSub{dlqSub: &dlqSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}, delay: time.Second}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    envelope: json\n" +
		"    retry: {maxDeliveries: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(f, nil, nil, nil)
	s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/context", func(c echo.Context) error {
		if err := c.Request().Context().Err(); err != nil {
			return c.String(499, "the request's context was done on arrival: "+err.Error())
		}
		return c.String(http.StatusOK, "live")
	})
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	resp, rd := get(t, hs.URL+"/v1/streams/s")
	f.feed <- &Delivery{ID: "1:0:1:-1", Topic: "persistent://public/default/t", Payload: []byte(`{}`)}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}

	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	roundTrip := func(req string) (int, string) {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatalf("writing on the kept-alive connection: %v", err)
		}
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer on the kept-alive connection: %v", err)
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Close {
			t.Fatalf("the answer %d %s closes the connection", r.StatusCode, b)
		}
		return r.StatusCode, string(b)
	}
	live := func(after string) {
		t.Helper()
		if code, b := roundTrip("GET /context HTTP/1.1\r\nHost: bridge\r\n\r\n"); code != http.StatusOK {
			t.Fatalf("the request after %s on the same connection: %d %s", after, code, b)
		}
	}

	body := `["1:0:1:-1"]`
	code, ans := roundTrip(fmt.Sprintf("POST /v1/streams/s/nack HTTP/1.1\r\nHost: bridge\r\nStream-Id: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", resp.Header.Get("Stream-Id"), len(body), body))
	if code != http.StatusOK || !strings.Contains(ans, `"deadLettered":1`) {
		t.Fatalf("nack: %d %s; want the message dead-lettered", code, ans)
	}
	live("a slow /nack")
	if code, ans := roundTrip("GET /v1/streams/s HTTP/1.1\r\nHost: bridge\r\nAccept: text/plain\r\nContent-Length: 2\r\n\r\nab"); code != http.StatusNotAcceptable {
		t.Fatalf("GET with Accept text/plain: %d %s", code, ans)
	}
	live("a refused GET with a body")
}
