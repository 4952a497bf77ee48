package egress

import (
	"bufio"
	"fmt"
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

// TestAnAckBodyThatStallsIsAnsweredAtItsDeadline: an /ack or /nack with a valid
// Stream-Id whose body stops before its end (an id sent, the rest of the announced
// bytes never) is answered 408 once ackBodyTimeout passes, the connection closed and
// nothing acknowledged. readIDs read it with no deadline: the handler, its goroutine
// and the connection waited for as long as the client kept the connection open.
func TestAnAckBodyThatStallsIsAnsweredAtItsDeadline(t *testing.T) {
	defer func(d time.Duration) { ackBodyTimeout = d }(ackBodyTimeout)
	ackBodyTimeout = 500 * time.Millisecond
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n"))
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
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	resp, rd := get(t, hs.URL+"/v1/streams/s")
	defer resp.Body.Close()
	f.feed <- &Delivery{ID: "1:0:1:-1", Topic: "persistent://public/default/t", Payload: []byte(`{}`)}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, ctype, sent string }{
		{"ack", "application/json", `["1:0:1:-1"`},
		{"nack", "application/json", `["1:0:1:-1", `},
		{"ack", "application/recordio", "9\n1:0:1:-1"},
	} {
		cn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(cn, "POST /v1/streams/s/%s HTTP/1.1\r\nHost: b\r\nStream-Id: %s\r\nContent-Type: %s\r\nContent-Length: 100\r\n\r\n%s",
			tc.path, resp.Header.Get("Stream-Id"), tc.ctype, tc.sent)
		// Generous: a missing answer fails the test instead of hanging it.
		_ = cn.SetReadDeadline(time.Now().Add(30 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(cn), nil)
		if err != nil {
			cn.Close()
			t.Fatalf("%s %s body stalled after %q: no answer: %v", tc.path, tc.ctype, tc.sent, err)
		}
		var b strings.Builder
		_, _ = fmt.Fscan(r.Body, &b)
		r.Body.Close()
		cn.Close()
		if r.StatusCode != http.StatusRequestTimeout || !r.Close {
			t.Errorf("%s %s: %d (close %v); want 408 and the connection closed", tc.path, tc.ctype, r.StatusCode, r.Close)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acked) != 0 || len(f.nacked) != 0 {
		t.Fatalf("acked %v, nacked %v from bodies that never ended", f.acked, f.nacked)
	}
}
