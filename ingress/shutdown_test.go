package ingress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// stuckConn models a client that stopped reading: once stuck, a write blocks as a full
// socket buffer does, until its write deadline passes or the connection closes.
type stuckConn struct {
	net.Conn
	l *stuckListener

	mu       sync.Mutex
	deadline time.Time
	changed  chan struct{} // closed and replaced when the deadline changes
	closed   chan struct{}
	once     sync.Once
}

func (c *stuckConn) Write(p []byte) (int, error) {
	for {
		select {
		case <-c.l.stuck:
		default:
			return c.Conn.Write(p)
		}
		c.mu.Lock()
		dl, changed := c.deadline, c.changed
		c.mu.Unlock()
		var timer <-chan time.Time
		if !dl.IsZero() {
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			timer = t.C
		}
		c.l.blocked.Do(func() { close(c.l.blockedC) })
		select {
		case <-timer:
			return 0, os.ErrDeadlineExceeded
		case <-changed:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
}

func (c *stuckConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *stuckConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *stuckConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type stuckListener struct {
	net.Listener
	stuck    chan struct{} // closed: every write blocks
	blocked  sync.Once
	blockedC chan struct{} // closed once a write has blocked
}

func (l *stuckListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stuckConn{Conn: c, l: l, changed: make(chan struct{}), closed: make(chan struct{})}, nil
}

// A client that stops reading its receipts must not keep the drain (and so SIGTERM)
// waiting past its deadline: the receipt writer has a write deadline, cut at the drain's.
func TestDrainEndsAtItsDeadlineWhenAClientStopsReadingItsReceipts(t *testing.T) {
	pub := newFake()
	s := New(pub, nil, nil, nil)
	l := limits
	l.IdleTimeout = time.Hour // the stuck write must be cut by the drain, not by the idle timeout
	s.Update(table(t, oneRoute), nil, l)
	e := echo.New()
	s.Register(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &stuckListener{Listener: ln, stuck: make(chan struct{}), blockedC: make(chan struct{})}
	hs := &httptest.Server{Listener: sl, Config: &http.Server{Handler: e}}
	hs.Start()
	t.Cleanup(hs.Close)
	t.Cleanup(hs.CloseClientConnections) // first: a connection whose writes block would keep Close waiting

	w, out := open(t, hs.URL+"/v1/publish/r")
	send(t, w, `{"n":0}`)
	if m := next(t, out); m["status"] != float64(200) {
		t.Fatalf("%v", m)
	}
	close(sl.stuck) // the client stops reading
	send(t, w, `{"n":1}`)
	select {
	case <-sl.blockedC:
	case <-time.After(10 * time.Second):
		t.Fatal("the receipt of the second record was never written")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- s.Drain(ctx) }()
	select {
	case err := <-drained:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Drain: %v, want the deadline's error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Drain still waits for a receipt writer blocked by a client that stopped reading")
	}
	// Its write cut, the stream ends (and the handler returns) without the client.
	for end := time.Now().Add(10 * time.Second); s.Active() != 0; {
		if time.Now().After(end) {
			t.Fatalf("%d streams still open after their writes were cut", s.Active())
		}
		time.Sleep(time.Millisecond)
	}
}
