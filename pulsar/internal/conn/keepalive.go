package conn

import (
	"fmt"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// liveness is what the writer tells the keep-alive about its progress: the broker may
// answer a PING only once it has read it, and a PING queued behind a large write (a
// resend after a reconnect) reaches a slow broker late.
type liveness struct {
	mu          sync.Mutex
	progress    time.Time // the last write that completed (a chunk of at most writeChunk)
	written     int64     // bytes written in all
	pingWritten time.Time // the last PING handed to the socket...
	pingEnd     int64     // ...and written by then
	pingRead    time.Time // when pingReadBound bytes had followed it: the broker has read it
	// pingPaced is the last write that completed after the PING while the writer had a
	// backlog all along since it: such writes are paced by the socket, so they show the
	// broker reading. Once the writer found nothing queued (idleSincePing), what it wrote
	// sits in buffers with room to spare, and a later write completes at once whether
	// the broker reads or not (a frozen one's kernel, or ours on a black-holed network,
	// takes a trickle of small writes for a long time): it no longer counts.
	pingPaced     time.Time
	idleSincePing bool
}

// pingReadBound is how much written after a PING proves the broker has read it: more
// than the socket buffers between the two ends can hold (Linux's defaults let them grow
// to 4 MiB for sending and 6 MiB for receiving).
const pingReadBound = 32 << 20

// keepAlive watches the connection from its own goroutine, so a writer blocked on a
// peer that stopped reading cannot blind it: it pings when nothing was sent or received
// for an interval and closes the connection when nothing arrived for two intervals and
// the PING went unanswered for one from when the broker could have read it (see
// pingAnswerDue).
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	interval := c.opts.KeepAlive
	ticker := time.NewTicker(max(interval/4, time.Millisecond))
	defer ticker.Stop()
	pinged := time.Time{} // when the last PING was queued
	for {
		select {
		case <-c.done:
			return
		case <-ticker.C:
			now := time.Now()
			last := time.Unix(0, c.lastReceived.Load())
			silent := now.Sub(last)
			asked := pinged.After(last) // a PING is out, and nothing arrived since
			// Dead only once a ping went unanswered for an interval: a late tick must
			// not condemn a peer that was never asked, nor one still reading what was
			// queued before the PING.
			if asked && silent > 2*interval && now.Sub(c.pingAnswerDue(pinged)) >= interval {
				c.closeWith(fmt.Errorf("%w: nothing for %s (%s)", ErrKeepAliveTimeout, silent.Round(time.Millisecond), c.pingState(pinged, now)))
				return
			}
			idle := now.Sub(time.Unix(0, c.lastSent.Load()))
			if !asked && (silent >= interval || idle >= interval) && now.Sub(pinged) >= interval {
				// Queued, never written from here: this goroutine must not block.
				c.queuePing()
				pinged = now
			}
		}
	}
}

// queuePing queues a PING and marks it, so the writer notes when it hands it over.
func (c *Conn) queuePing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.tail, _ = frame.AppendCommand(c.tail, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.pingInTail = true
	c.kickWriter()
}

// pingAnswerDue is when the broker could have read the PING queued at pinged, at the
// latest known: the interval for its answer runs from there. While the PING still waits
// behind other writes, every write that completes shows the broker reading (a frozen or
// black-holed one takes nothing once the buffers are full, and a write stalls): the
// answer is due an interval after the last one. Once written, the PING may still sit in
// the socket buffers behind what was written before it; writes that complete count
// only while the writer had a backlog all along since the PING (paced by the socket):
// once it went idle, a write completes at once into free buffer space whether or not
// the broker reads, so a trickle of them must not excuse a frozen or black-holed broker
// (see liveness.pingPaced). Once pingReadBound bytes followed it, the broker has read
// it, and no later write excuses its silence.
func (c *Conn) pingAnswerDue(pinged time.Time) time.Time {
	l := &c.live
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.pingWritten.Before(pinged): // still queued
		return later(pinged, l.progress)
	case !l.pingRead.Before(l.pingWritten):
		return l.pingRead
	}
	return later(l.pingWritten, l.pingPaced)
}

// pingState says where the unanswered PING is, for the keep-alive's error.
func (c *Conn) pingState(pinged, now time.Time) string {
	l := &c.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pingWritten.Before(pinged) {
		return fmt.Sprintf("ping queued %s ago, no write completed for %s", now.Sub(pinged).Round(time.Millisecond),
			now.Sub(l.progress).Round(time.Millisecond))
	}
	return fmt.Sprintf("ping written %s ago", now.Sub(l.pingWritten).Round(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// wrote notes a completed write of n bytes for the keep-alive.
func (l *liveness) wrote(n int64) {
	now := time.Now()
	l.mu.Lock()
	l.progress = now
	l.written += n
	if !l.idleSincePing {
		l.pingPaced = now
	}
	if !l.pingWritten.IsZero() && l.pingRead.Before(l.pingWritten) && l.written-l.pingEnd >= pingReadBound {
		l.pingRead = now
	}
	l.mu.Unlock()
}

// wrotePing notes that everything written so far includes the last PING queued.
func (l *liveness) wrotePing() {
	now := time.Now()
	l.mu.Lock()
	l.pingWritten, l.pingEnd = now, l.written
	l.pingPaced, l.idleSincePing = now, false
	l.mu.Unlock()
}

// wentIdle notes that the writer has written everything queued: writes that complete
// from now on may go into free buffer space, and show nothing of the broker reading.
func (l *liveness) wentIdle() {
	l.mu.Lock()
	l.idleSincePing = true
	l.mu.Unlock()
}
