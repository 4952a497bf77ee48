package ingress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/recordio"
)

// unavailableFirst fails a request's first record with ErrUnavailable (503) once the
// second is published (so the stream has read both, and its body's end, before it stops
// reading: failed at once, the first record could stop it before it read the second,
// and the test failed now and then) and settles the others only once their context
// ends or heldFor has passed, so the stream is still running well after it stopped
// reading its (already ended) body.
type unavailableFirst struct {
	mu      sync.Mutex
	calls   int
	heldFor time.Duration
	second  chan struct{} // closed when the second record is published
	wg      sync.WaitGroup
}

func (p *unavailableFirst) PublishAsync(ctx context.Context, m *Message, done func(string, error)) {
	p.mu.Lock()
	i := p.calls
	p.calls++
	hold := p.heldFor
	p.mu.Unlock()
	if hold == 0 {
		done(fmt.Sprintf("1:%d:-1:-1", i), nil)
		return
	}
	if i == 0 {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			select {
			case <-p.second:
			case <-ctx.Done():
			case <-time.After(30 * time.Second): // the second never came: the test fails on the answer
			}
			done("", fmt.Errorf("%w: the test's broker is away", ErrUnavailable))
		}()
		return
	}
	if i == 1 {
		close(p.second)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-ctx.Done(): // the request's context was cancelled under the stream
		case <-t.C:
		}
		done(fmt.Sprintf("1:%d:-1:-1", i), nil)
	}()
}

func (p *unavailableFirst) PublishStream(ctx context.Context, m *Message, size int64, r io.Reader) (string, error) {
	return "", fmt.Errorf("%w: not used", ErrRefused)
}

// roundTrip writes one raw HTTP/1.1 request on conn and reads its whole response.
func roundTrip(t *testing.T, conn net.Conn, br *bufio.Reader, req string) (int, string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("writing the request on the kept-alive connection: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer on the kept-alive connection: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	if resp.Close {
		t.Fatalf("the answer %d %s closes the connection", resp.StatusCode, b)
	}
	return resp.StatusCode, string(b)
}

func rawPublish(path string, body []byte, streaming bool) string {
	accept := ""
	if streaming {
		accept = "Accept: application/recordio\r\n"
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: bridge\r\nContent-Type: application/recordio\r\n"+
		"Message-Content-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", path, accept, len(body), body)
}

// TestAKeptAliveConnectionServesTheNextRequestAfterAStreamStoppedReading: a client sends
// its whole body, the broker fails the first record (503), so the stream stops reading,
// and the stream waits on for the other records' receipts; then the client sends its
// next request, a POST and then a GET, on the same connection. Stopping the reading set
// a read deadline although net/http had already seen the body's end and was reading
// the connection in the background: that read failed at the deadline and cancelled the
// connection's context, so every later request on the connection started cancelled
// (ingress answered the next POST 499 "the client went away" without reading it).
func TestAKeptAliveConnectionServesTheNextRequestAfterAStreamStoppedReading(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			pub := &unavailableFirst{heldFor: 2 * time.Second, second: make(chan struct{})} // 20 × stopGrace
			t.Cleanup(pub.wg.Wait)
			s := New(pub, nil, nil, nil)
			s.Update(table(t, oneRoute), nil, limits)
			e := echo.New()
			s.Register(e)
			e.GET("/context", func(c echo.Context) error {
				if err := c.Request().Context().Err(); err != nil {
					return c.String(499, "the request's context was done on arrival: "+err.Error())
				}
				return c.String(http.StatusOK, "live")
			})
			hs := httptest.NewUnstartedServer(e)
			hs.EnableHTTP2 = false
			hs.Start()
			t.Cleanup(hs.Close)

			conn, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			body := recordio.AppendRecord(recordio.AppendRecord(nil, []byte(`{"n":1}`)), []byte(`{"n":2}`))

			status, ans := roundTrip(t, conn, br, rawPublish("/v1/publish/r", body, streaming))
			if status != http.StatusOK && status != http.StatusServiceUnavailable || !strings.Contains(ans, `"status":503`) ||
				!strings.Contains(ans, `"published":1`) {
				t.Fatalf("first request: %d %s; want the 503 of record 0 and record 1 published", status, ans)
			}
			pub.mu.Lock()
			pub.heldFor = 0
			pub.mu.Unlock()
			status, ans = roundTrip(t, conn, br, rawPublish("/v1/publish/r", body, streaming))
			if status != http.StatusOK || !strings.Contains(ans, `"published":2`) || !strings.Contains(ans, `"status":200`) {
				t.Fatalf("the next POST on the connection: %d %s; want both records published", status, ans)
			}
			status, ans = roundTrip(t, conn, br, "GET /context HTTP/1.1\r\nHost: bridge\r\n\r\n")
			if status != http.StatusOK {
				t.Fatalf("a GET after them on the connection: %d %s", status, ans)
			}
		})
	}
}
