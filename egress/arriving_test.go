package egress

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/mapping"
)

// burstSub hands out a burst of messages the way a consumer's reader does: one at a
// time, each found by the TryReceive after one that found nothing, while Arriving says
// the rest are on their way; arriving false makes it a consumer that cannot tell.
type burstSub struct {
	mu       sync.Mutex
	msgs     []*Delivery
	ready    bool // the next message has been dispatched
	arriving bool
}

func (b *burstSub) Subscribe(context.Context, SubscribeOptions) (Subscription, error) { return b, nil }

func (b *burstSub) TryReceive() (*Delivery, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.msgs) == 0 || !b.ready {
		b.ready = true // dispatched by the time it is asked again
		return nil, false
	}
	d := b.msgs[0]
	b.msgs, b.ready = b.msgs[1:], false
	return d, true
}

func (b *burstSub) Receive(ctx context.Context) (*Delivery, error) {
	if d, ok := b.TryReceive(); ok {
		return d, nil
	}
	if d, ok := b.TryReceive(); ok {
		return d, nil
	}
	return nil, ErrEndOfTopic
}

func (b *burstSub) Arriving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.arriving && len(b.msgs) > 0
}

func (b *burstSub) Ack(*Delivery) error           { return nil }
func (b *burstSub) Nack(*Delivery, time.Duration) {}
func (b *burstSub) Close() error                  { return nil }

// countingListener counts the writes made to the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// streamWrites serves sub's stream, reads n records from it to the end, and returns how
// many writes the server made to the connection.
func streamWrites(t *testing.T, sub Subscriber, n int) int64 {
	t.Helper()
	cfg, err := config.Parse([]byte("pulsar: {url: pulsar://127.0.0.1:6650}\nstreams:\n  - name: s\n    topics: [t]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := admission.Compile(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	s := New(sub, nil, nil, nil)
	s.Update(tab, auth, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	hs := httptest.NewUnstartedServer(e)
	var writes atomic.Int64
	hs.Listener = countingListener{hs.Listener, &writes}
	hs.Start()
	defer hs.Close()
	_, rd := get(t, hs.URL+"/v1/streams/s")
	for i := range n {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := fmt.Sprintf("m%03d", i); string(rec) != want {
			t.Fatalf("record %d is %q, want %q", i, rec, want)
		}
	}
	if _, err := rd.Next(); err == nil {
		t.Fatal("a record after the burst")
	}
	return writes.Load()
}

func burst(n int) []*Delivery {
	ds := make([]*Delivery, n)
	for i := range ds {
		ds[i] = &Delivery{ID: fmt.Sprintf("1:%d:0:-1", i), Topic: "t", Payload: []byte(fmt.Sprintf("m%03d", i))}
	}
	return ds
}

// TestABurstOfMessagesIsWrittenInOneFlush: messages the consumer is still dispatching
// when the stream finds its queue empty are waited for, and the burst goes out in one
// write, not one per message (which cost a write, a deadline and the acknowledgements'
// round per message at any rate the stream keeps up with). A consumer that cannot tell
// still gets each message flushed at once.
func TestABurstOfMessagesIsWrittenInOneFlush(t *testing.T) {
	const n = 50
	waited := streamWrites(t, &burstSub{msgs: burst(n), arriving: true}, n)
	flushedEach := streamWrites(t, &burstSub{msgs: burst(n)}, n)
	t.Logf("writes to the connection: %d waiting for arriving messages, %d without", waited, flushedEach)
	if flushedEach < n {
		t.Fatalf("without Arriving the stream made %d writes for %d messages: the test does not reproduce a flush per message", flushedEach, n)
	}
	if waited > 5 {
		t.Fatalf("the stream made %d writes for a burst of %d messages on their way, want a handful (the headers, the burst, the end)", waited, n)
	}
}
