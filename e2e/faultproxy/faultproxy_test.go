package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every connection with the bytes it receives.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	werr := make(chan error, 1)
	go func() { _, err := c.Write(msg); werr <- err }()
	defer func() {
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo differs: %d bytes back", len(got))
	}
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// Every fault but the black hole delivers every byte, in order.
func TestFaultsKeepTheBytes(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, tc := range []struct {
		f Faults
		n int
	}{
		{Faults{}, 1 << 20},
		{Faults{Latency: 5 * time.Millisecond, Jitter: 10 * time.Millisecond}, 1 << 20},
		{Faults{BytesPerSecond: 1 << 20}, 100 << 10},
		{Faults{SliceBytes: 3, SliceDelay: 100 * time.Microsecond}, 1000},
	} {
		p.Set(tc.f)
		c := dial(t, p)
		roundTrip(t, c, payload(tc.n))
		c.Close()
	}
}

// A black hole passes nothing until it is cleared; then the held bytes arrive.
func TestBlackholeHoldsBytesUntilHealed(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	p.Set(Faults{Blackhole: true})
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var one [1]byte
	if n, err := c.Read(one[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a black hole: %d bytes, %v", n, err)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
}

// Reset ends open connections with a TCP reset; Refuse turns new ones away.
func TestResetAndRefuse(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset ended %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var one [1]byte
	if _, err := c.Read(one[:]); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after a reset: %v, want ECONNRESET", err)
	}
	p.Set(Faults{Refuse: true})
	// The proxy accepts and resets at once, so the reset may reach the client
	// before its connect returns: a failed dial is a refusal too.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial while refusing: %v, want a connection reset", err)
		}
		return
	}
	defer c2.Close()
	_ = c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c2.Read(one[:]); err == nil {
		t.Fatal("a refused connection answered")
	}
}

// Stats counts the chunks a fault acted on, and only those: traffic without a fault adds
// chunks but no faulted ones; under latency, a bandwidth cap, slicing or a black hole each
// round trip adds faulted chunks held at least as long as the fault says.
func TestStatsCountWhatTheFaultsActedOn(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	defer c.Close()
	roundTrip(t, c, []byte("clean"))
	s0 := p.Stats()
	if s0.Chunks < 2 || s0.Faulted != 0 || s0.Held != 0 {
		t.Fatalf("after a round trip without faults: %+v, want 2 chunks or more and none faulted", s0)
	}
	for _, f := range []Faults{
		{Latency: 30 * time.Millisecond},
		{BytesPerSecond: 1 << 10},
		{SliceBytes: 3, SliceDelay: time.Millisecond},
	} {
		p.Set(f)
		before := p.Stats()
		roundTrip(t, c, []byte("0123456789"))
		after := p.Stats()
		// One chunk each way; sliced, the echo comes back in segments no longer than the
		// slice, which the fault leaves as they are.
		want := int64(2)
		if f.SliceBytes > 0 {
			want = 1
		}
		if n := after.Faulted - before.Faulted; n < want {
			t.Errorf("%+v: %d chunks faulted in a round trip, want %d", f, n, want)
		}
		if f.Latency > 0 && after.Held-before.Held < 2*f.Latency {
			t.Errorf("%+v: held %s in a round trip, want %s at least", f, after.Held-before.Held, 2*f.Latency)
		}
	}
	p.Set(Faults{Blackhole: true})
	before := p.Stats()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	p.Heal()
	got := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if after := p.Stats(); after.Faulted-before.Faulted < 1 || after.Held-before.Held < 50*time.Millisecond {
		t.Errorf("black hole of 50 ms: %d chunks faulted, held %s; want 1 chunk or more held 50 ms or more",
			after.Faulted-before.Faulted, after.Held-before.Held)
	}
	p.Heal()
	before = p.Stats()
	roundTrip(t, c, []byte("healed"))
	if after := p.Stats(); after.Faulted != before.Faulted {
		t.Errorf("after healing a round trip counted %d faulted chunks, want none", after.Faulted-before.Faulted)
	}
}
