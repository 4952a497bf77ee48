// Package faultproxy is an in-process TCP proxy that puts network faults between the bridge
// and a broker for the fault suite: added latency with jitter, a bandwidth cap, a black hole
// (the connection stays open but passes no bytes), resets, and slicing into tiny segments.
// Faults can be changed at any time and apply to open connections at once.
package faultproxy

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is what the proxy does to the bytes it passes, in both directions.
type Faults struct {
	Latency time.Duration // added to every chunk's delivery
	Jitter  time.Duration // plus a uniform random 0..Jitter per chunk (order is kept)
	// BytesPerSecond caps each direction of each connection; 0 is no cap.
	BytesPerSecond int
	// Blackhole stops passing bytes: nothing is delivered (and, by back-pressure, nothing is
	// read) until it is cleared, when the held bytes flow again, as after a network partition.
	Blackhole bool
	// SliceBytes, when > 0, writes every chunk in segments of at most this many bytes,
	// SliceDelay apart.
	SliceBytes int
	SliceDelay time.Duration
	// Refuse closes new connections at once (a peer that is gone).
	Refuse bool
}

// Proxy forwards connections accepted on its listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	faults Faults
	wake   chan struct{} // closed and replaced whenever faults change
	links  map[*link]struct{}
	closed chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	chunks, faulted, held atomic.Int64 // for Stats
}

// Stats is what the proxy did to the bytes it passed since it started, in both directions.
// A judge of a fault reads it before and after: the faults acted on the traffic when
// Faulted grew, whatever the machine's load did to the timing of the peers.
type Stats struct {
	Chunks int64 // chunks delivered (what one read brought)
	// Faulted is how many of them a fault acted on: delivered late (latency, jitter),
	// throttled, sliced into several segments or held by a black hole.
	Faulted int64
	Held    time.Duration // how long the faulted chunks were held in all, from read until written
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{Chunks: p.chunks.Load(), Faulted: p.faulted.Load(), Held: time.Duration(p.held.Load())}
}

type link struct{ a, b net.Conn }

// New listens on listen (host:port; port 0 picks one) and forwards to target.
func New(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, wake: make(chan struct{}), links: map[*link]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the faults; open connections follow the new ones at once.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	p.faults = f
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// Heal clears every fault.
func (p *Proxy) Heal() { p.Set(Faults{}) }

func (p *Proxy) current() (Faults, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults, p.wake
}

// Conns is the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Reset ends every open connection with a TCP reset on both sides and returns how many
// there were.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	return len(ls)
}

func (l *link) close() {
	_ = l.a.Close()
	_ = l.b.Close()
}

func (l *link) reset() {
	for _, c := range []net.Conn{l.a, l.b} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops listening, resets every connection and waits for every goroutine to end.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.closed)
		err = p.ln.Close()
		p.Reset()
		p.wg.Wait()
	})
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if f, _ := p.current(); f.Refuse {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(a net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 10 * time.Second}
	b, err := d.Dial("tcp", p.target)
	if err != nil {
		_ = a.Close()
		return
	}
	l := &link{a: a, b: b}
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		l.reset()
		return
	default:
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(b, a, l) }()
	go func() { defer wg.Done(); p.pipe(a, b, l) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

type chunk struct {
	b  []byte
	at time.Time // when it was read
}

// pipe copies src to dst through the faults: a reader stamps chunks, a writer delivers
// each one when its latency has passed, within the bandwidth cap, sliced, unless black-holed.
func (p *Proxy) pipe(dst, src net.Conn, l *link) {
	q := make(chan chunk, 16)
	done := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(q)
		for {
			buf := make([]byte, 16<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{b: buf[:n], at: time.Now()}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(done)
		l.close() // ends the reader's Read and the other direction
		<-readerDone
	}()
	var lastDue time.Time
	for c := range q {
		f, wake := p.current()
		delay := f.Latency
		if f.Jitter > 0 {
			delay += rand.N(f.Jitter)
		}
		due := c.at.Add(delay)
		if due.Before(lastDue) {
			due = lastDue // jitter never reorders bytes
		}
		lastDue = due
		faulted := delay > 0
		if !p.waitUntil(due) {
			return
		}
		for f.Blackhole {
			faulted = true
			select {
			case <-wake:
			case <-p.closed:
				return
			}
			f, wake = p.current()
		}
		// Counted as its writing begins, so a peer that got the bytes sees them counted.
		p.chunks.Add(1)
		if faulted || f.BytesPerSecond > 0 || f.SliceBytes > 0 && f.SliceBytes < len(c.b) {
			p.faulted.Add(1)
			p.held.Add(int64(time.Since(c.at)))
		}
		if err := p.write(dst, c.b, f); err != nil {
			return
		}
	}
}

func (p *Proxy) waitUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-p.closed:
		return false
	}
}

func (p *Proxy) write(dst net.Conn, b []byte, f Faults) error {
	seg := len(b)
	if f.SliceBytes > 0 && f.SliceBytes < seg {
		seg = f.SliceBytes
	}
	for len(b) > 0 {
		n := min(seg, len(b))
		start := time.Now()
		if _, err := writeFull(dst, b[:n]); err != nil {
			return err
		}
		b = b[n:]
		var pause time.Duration
		if f.BytesPerSecond > 0 {
			pause = time.Duration(float64(n)/float64(f.BytesPerSecond)*float64(time.Second)) - time.Since(start)
		}
		if len(b) > 0 && f.SliceDelay > pause {
			pause = f.SliceDelay
		}
		if pause > 0 && !p.waitUntil(time.Now().Add(pause)) {
			return errors.New("faultproxy: closed")
		}
	}
	return nil
}

func writeFull(w io.Writer, b []byte) (int, error) {
	// A write deadline bounds a peer that stopped reading for good.
	if c, ok := w.(net.Conn); ok {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Minute))
	}
	return w.Write(b)
}
