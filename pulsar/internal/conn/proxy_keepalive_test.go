package conn

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/tcptest"
)

// cappedProxy forwards a TCP connection to target as e2e/faultproxy does with
// BytesPerSecond set: it reads from the client in chunks of at most 16 KiB and writes
// each to the target, pacing itself to rate bytes a second; the reverse direction is
// copied as is.
func cappedProxy(t *testing.T, target string, rate int) string {
	return tcptest.Serve(t, func(srv *tcptest.Server, a net.Conn) {
		b, err := net.Dial("tcp", target)
		if err != nil {
			a.Close()
			return
		}
		srv.Track(b)
		srv.Go(func() { _, _ = io.Copy(a, b) })
		buf := make([]byte, 16<<10)
		for {
			n, err := a.Read(buf)
			if n > 0 {
				time.Sleep(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
				if _, err := b.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}).Addr()
}

// quietLargeWrites writes one frame of size bytes every period until c ends or limit
// passes; it returns how long c lived.
func quietLargeWrites(t *testing.T, c *Conn, size int, period, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	big := make([]byte, size)
	tk := time.NewTicker(period)
	defer tk.Stop()
	stop := time.After(limit)
	_ = c.SendFrame(big)
	for {
		select {
		case <-c.Done():
			return time.Since(start)
		case <-stop:
			c.live.mu.Lock()
			t.Logf("still up after %s: %d bytes written", time.Since(start).Round(time.Millisecond), c.live.written)
			c.live.mu.Unlock()
			return time.Since(start)
		case <-tk.C:
			_ = c.SendFrame(big)
		}
	}
}

// TestAFrozenBrokerBehindARateCappedProxyIsDeclaredDead: the broker freezes (reads
// nothing after its first frame) behind a proxy capping the path to 250 KB/s, as
// e2e/faultproxy does with BytesPerSecond; a quiet producer sends 1 MiB every 4 s. The
// proxy keeps reading from us for a while, so our socket's send queue keeps shrinking:
// a keep-alive that took that for the broker reading (an attempt did, with SIOCOUTQ)
// kept this connection ~18 intervals. It must be dead within a few.
func TestAFrozenBrokerBehindARateCappedProxyIsDeclaredDead(t *testing.T) {
	s := frozenStub(t)
	addr := cappedProxy(t, s.srv.Addr(), 250_000)
	interval := time.Second
	c, err := Dial(context.Background(), Options{Addr: addr, KeepAlive: interval, WriteTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(lookup(1)); err != nil { // the broker reads this one, then freezes
		t.Fatal(err)
	}
	lived := quietLargeWrites(t, c, 1<<20, 4*time.Second, 20*interval)
	t.Logf("lived %s: %v", lived.Round(time.Millisecond), c.Err())
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) || lived > 5*interval {
		t.Fatalf("a frozen broker behind a rate-capped proxy: connection lived %s (interval %s), err %v; want a keep-alive timeout within ~3 intervals",
			lived.Round(time.Millisecond), interval, c.Err())
	}
}

// TestABrokerThatReadsButNeverAnswersIsDeclaredDeadUnderAQuietProducer: a peer that
// reads (through the same 250 KB/s proxy) and never answers anything, under the same
// quiet producer: the bytes it takes must not excuse its silence beyond a few
// intervals.
func TestABrokerThatReadsButNeverAnswersIsDeclaredDeadUnderAQuietProducer(t *testing.T) {
	s := newStub(t, nil) // reads every frame, answers none
	addr := cappedProxy(t, s.srv.Addr(), 250_000)
	interval := time.Second
	c, err := Dial(context.Background(), Options{Addr: addr, KeepAlive: interval, WriteTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lived := quietLargeWrites(t, c, 1<<20, 4*time.Second, 20*interval)
	t.Logf("lived %s: %v", lived.Round(time.Millisecond), c.Err())
	if !errors.Is(c.Err(), ErrKeepAliveTimeout) || lived > 5*interval {
		t.Fatalf("a broker reading and never answering: connection lived %s (interval %s), err %v; want a keep-alive timeout within ~3 intervals",
			lived.Round(time.Millisecond), interval, c.Err())
	}
}
