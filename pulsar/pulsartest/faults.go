// Fault injection: refused, failed, corrupted, held or late answers; frozen, slow
// and dropped connections.

package pulsartest

import (
	"net"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// CorruptNextSends flips a payload bit in the next n SEND frames as they arrive; the
// broker then answers each with SEND_ERROR ChecksumError, as a real broker does.
func (b *Broker) CorruptNextSends(n int) { b.mu.Lock(); b.corruptSends = n; b.mu.Unlock() }

// SetReceiptDelay sends each receipt d after the message was persisted.
func (b *Broker) SetReceiptDelay(d time.Duration) { b.mu.Lock(); b.receiptDelay = d; b.mu.Unlock() }

// SkipReceipts persists the next n messages without ever answering them, so the next
// receipt the client sees is ahead of its oldest pending message.
func (b *Broker) SkipReceipts(n int) { b.mu.Lock(); b.skipReceipts = n; b.mu.Unlock() }

// HoldReceipts persists messages but withholds their receipts (and the ChecksumError
// refusals of CorruptNextSends) until released; releasing sends the held answers in
// order on their (possibly dead) connections.
func (b *Broker) HoldReceipts(on bool) {
	if on {
		b.mu.Lock()
		b.holdReceipts = true
		b.mu.Unlock()
		return
	}
	// Release in order, as a broker answers one producer: receipts of SENDs that arrive
	// while the held ones are replayed are held too and replayed after them, never
	// answered ahead of them.
	for {
		b.mu.Lock()
		held := b.held
		b.held = nil
		if len(held) == 0 {
			b.holdReceipts = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		for _, f := range held {
			f()
		}
	}
}

// FailNextSends answers the next SENDs with these errors, one each, instead of persisting.
func (b *Broker) FailNextSends(codes ...int32) {
	b.mu.Lock()
	for _, c := range codes {
		b.sendErrors = append(b.sendErrors, pb.ServerError(c))
	}
	b.mu.Unlock()
}

// SetIgnorePings makes the broker stop answering PING (a dead peer).
func (b *Broker) SetIgnorePings(on bool) { b.mu.Lock(); b.ignorePings = on; b.mu.Unlock() }

// StopReading freezes every open connection, as a stopped JVM or a black-holed network
// would: nothing more is read from it (the client's socket buffers fill and its writes
// block) and nothing more is sent on it, until the client or Close ends it.
// Connections made later are served normally.
func (b *Broker) StopReading() {
	b.mu.Lock()
	for c := range b.conns {
		c.frozen = true
	}
	b.mu.Unlock()
}

// SlowReading makes the broker read every connection at most n bytes at a time, each
// read after a pause of every, as a broker starved of CPU does: the client's writes make
// progress, slowly, and what it queued behind them (a PING) reaches the broker late.
// n <= 0 reads at full speed again.
func (b *Broker) SlowReading(n int, every time.Duration) {
	b.mu.Lock()
	b.slowBytes, b.slowEvery = n, every
	b.mu.Unlock()
}

// throttledReader is a connection's reader under SlowReading.
type throttledReader struct{ c *serverConn }

func (t throttledReader) Read(p []byte) (int, error) {
	t.c.b.mu.Lock()
	n, every := t.c.b.slowBytes, t.c.b.slowEvery
	t.c.b.mu.Unlock()
	if n <= 0 {
		return t.c.nc.Read(p)
	}
	timer := time.NewTimer(every)
	defer timer.Stop()
	select {
	case <-t.c.gone:
		return 0, net.ErrClosed
	case <-timer.C:
	}
	return t.c.nc.Read(p[:min(len(p), n)])
}

// ReleaseReceipts sends the n oldest held answers (receipts, and the ChecksumError
// refusals of CorruptNextSends held with them), in order, and goes on holding the rest
// and what comes next: a test lets the client read one answer before the next.
func (b *Broker) ReleaseReceipts(n int) {
	b.mu.Lock()
	n = min(n, len(b.held))
	first := b.held[:n:n]
	b.held = append([]func(){}, b.held[n:]...)
	b.mu.Unlock()
	for _, f := range first {
		f()
	}
}

// DropAfterFrames closes every connection once it has received n more frames (0 disables).
func (b *Broker) DropAfterFrames(n int) { b.mu.Lock(); b.dropAfter = n; b.mu.Unlock() }

// CloseAfterAnswering makes the broker close the connection right after it answered the
// next n commands of type t (PRODUCER or SUBSCRIBE): the answer and the close reach the
// client back to back, the race a registration must survive.
func (b *Broker) CloseAfterAnswering(t CommandType, n int) {
	b.mu.Lock()
	if b.closeAfter == nil {
		b.closeAfter = map[pb.BaseCommand_Type]int{}
	}
	b.closeAfter[t] = n
	b.mu.Unlock()
}

// RefuseNext answers the next commands of type t with an error of these codes, one
// each, instead of serving them: ERROR for a command with a request id (PRODUCER,
// SUBSCRIBE, LOOKUP, PARTITIONED_METADATA, ...), SEND_ERROR for SEND.
func (b *Broker) RefuseNext(t CommandType, codes ...ServerError) {
	b.mu.Lock()
	if b.refuse == nil {
		b.refuse = map[pb.BaseCommand_Type][]pb.ServerError{}
	}
	b.refuse[t] = append(b.refuse[t], codes...)
	b.mu.Unlock()
}

// Refusals returns how many RefuseNext codes for t are still unused.
func (b *Broker) Refusals(t CommandType) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.refuse[t])
}

// refused answers f with an injected ERROR when RefuseNext asked for one.
func (c *serverConn) refused(f *frame.Frame) bool {
	t := f.Cmd.GetType()
	c.b.mu.Lock()
	codes := c.b.refuse[t]
	if len(codes) == 0 {
		c.b.mu.Unlock()
		return false
	}
	code := codes[0]
	c.b.refuse[t] = codes[1:]
	c.b.mu.Unlock()
	return c.answerError(f, code, "injected by pulsartest")
}

// DropConnections closes every client connection now.
func (b *Broker) DropConnections() {
	b.mu.Lock()
	conns := make([]*serverConn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.held = nil
	// Their subscribers go now, not when each connection's reader notices: a message
	// delivered after this call goes to a subscriber that is still connected.
	kept := b.subs[:0]
	for _, s := range b.subs {
		if _, dropped := b.conns[s.c]; !dropped {
			kept = append(kept, s)
		}
	}
	b.subs = kept
	b.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}
