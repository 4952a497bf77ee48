package httpreply

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"
)

// countingBody counts the reads of a request body.
type countingBody struct {
	io.ReadCloser
	reads atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.ReadCloser.Read(p)
}

// TestDropBodyWaitsOutItsGraceOnce: a GET announcing a body it never finishes is
// refused with 400 after DropBody's grace; the answer (Error) asks DropBody again
// whether the connection may stay open. That second question must be answered from the
// first outcome, not by reading the body for another grace: it did once, and the answer
// came after two graces.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDropBodyWaitsOutItsGraceOnce(t *testing.T) {
	type outcome struct {
		first, second bool
		readsBetween  int64
	}
	got := make(chan outcome, 1)
	e := echo.New()
	e.GET("/s", func(c echo.Context) error {
		body := &countingBody{ReadCloser: c.Request().Body}
		c.Request().Body = body
		first := DropBody(c)
		before := body.reads.Load()
		second := DropBody(c)
		got <- outcome{first, second, body.reads.Load() - before}
		return Error(c, http.StatusBadRequest, "a GET of a stream has no body; this one did not end", 0)
	})
	srv := httptest.NewServer(e)
	defer srv.Close()

	cn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	// 10 bytes announced, 3 sent, the rest never.
	if _, err := fmt.Fprintf(cn, "GET /s HTTP/1.1\r\nHost: b\r\nContent-Length: 10\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(cn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	o := <-got
	if o.first || o.second {
		t.Fatalf("DropBody said the unfinished body ended: first %v, second %v", o.first, o.second)
	}
	if o.readsBetween != 0 {
		t.Fatalf("the second DropBody read the body %d more times: it waited out a second grace", o.readsBetween)
	}
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("answer %d, close %v; want 400 and the connection closed", resp.StatusCode, resp.Close)
	}
}
