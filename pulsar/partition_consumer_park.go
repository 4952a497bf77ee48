package pulsar

import (
	"context"

	"github.com/recordio-bridge/bridge/pulsar/internal/delivery"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// A compressed message or batch may decompress to far more than the broker's limit
// (up to MaxChunkedMessageSize). Decompressed on the connection's reader as it arrives,
// each permit in flight could bring that much at once, beyond any budget. So the reader
// decompresses such an entry only when the MemoryLimiter has room for it now; otherwise
// the entry is parked as stored (bounded, like every frame, by the broker's limit), and
// so is every entry after it on the partition, to keep their order. The partition's
// drainer takes them in order, waiting for room before it decompresses a large one: it
// stalls this partition alone, and an entry larger than the whole budget waits until
// nothing else is held (the budget's rule for every request). Entries within the
// broker's limit take the reader's path as before, without waiting.

// waitLimiter is a MemoryLimiter that can admit a request fairly (internal/budget's
// Budget): TryAcquire takes room only when it fits (or nothing is held at all) and
// nobody waits for it. With a MemoryLimiter that cannot, a large entry is decompressed
// as it arrives and charged beyond the limit, as before.
type waitLimiter interface {
	TryAcquire(n int64) bool
}

func (p *partitionConsumer) waitLimiter() waitLimiter {
	wl, _ := p.opts.MemoryLimiter.(waitLimiter)
	return wl
}

// parkedFrame is an entry kept as stored until the drainer delivers it.
type parkedFrame struct {
	h        *consumerHandle
	cmd      *pb.CommandMessage
	f        *frame.Frame
	frameErr error
	held     int // its stored size, counted in heldBytes while parked
	permits  int // what it cost in flow permits
	// delivering: the drainer is handing it up; its permits return with its messages.
	delivering bool
}

// parkLocked parks an entry (whose permits landedLocked accounted) and starts the
// drainer if it is not running.
func (p *partitionConsumer) parkLocked(h *consumerHandle, cmd *pb.CommandMessage, f *frame.Frame, frameErr error, permits int) {
	pf := &parkedFrame{h: h, cmd: cmd, f: f, frameErr: frameErr, held: len(f.Metadata) + len(f.Payload), permits: permits}
	p.parked = append(p.parked, pf)
	p.heldBytes += pf.held
	p.wakeDrainLocked() // its landing may have returned the partition's reservation
	if p.drain == nil {
		ctx, cancel := contextUntil(p.done)
		p.drain = &drainer{cancel: cancel, wake: make(chan struct{}, 1)}
		p.wg.Add(1)
		go p.drainParked(ctx, p.drain)
	}
}

// dropParkedLocked forgets the parked entries: the registration they came on is gone
// (they come again on the next one, like the queued messages) or the consumer closes.
// A drainer waiting for room stops.
func (p *partitionConsumer) dropParkedLocked() {
	clear(p.parked)
	p.parked = p.parked[:0]
	if p.drain != nil {
		p.drain.cancel()
		p.drain = nil
	}
}

// unparkLocked drops the parked entries for a redelivery of everything, returning the
// permits and bytes they stood for, as Consumer.removeFrom does for queued messages.
func (p *partitionConsumer) unparkLocked() (permits, bytes int) {
	for _, pf := range p.parked {
		if !pf.delivering {
			permits += pf.permits
			bytes += pf.held
		}
	}
	p.dropParkedLocked()
	return permits, bytes
}

// drainParked delivers the parked entries in order, each once the MemoryLimiter has
// room for what it decompresses to. An entry stays first in p.parked until its messages
// are queued, so the reader parks what comes meanwhile behind it.
func (p *partitionConsumer) drainParked(ctx context.Context, d *drainer) {
	defer p.wg.Done()
	defer d.cancel()
	wl := p.waitLimiter()
	for {
		p.mu.Lock()
		if p.drain != d || len(p.parked) == 0 {
			if p.drain == d {
				p.drain = nil
			}
			p.mu.Unlock()
			return
		}
		pf := p.parked[0]
		if p.reg != pf.h || p.state != stateReady || p.halted {
			p.dropParkedLocked()
			p.mu.Unlock()
			return
		}
		need := 0
		lim := p.limitsLocked()
		lim.Admit = func(n int) bool { need = n; return wl == nil }
		e, err := delivery.Parse(pf.f.Metadata, pf.f.Payload, pf.cmd.GetAckSet(), lim)
		admitted := 0
		if pf.frameErr == nil && err == nil && e.Kind == delivery.Deferred {
			if !p.roomForParkedLocked(ctx, d, wl, need) {
				// Closing, or the registration was lost (dropParkedLocked): the
				// entries come again, if ever, on the next one.
				if p.drain == d {
					p.drain = nil
				}
				p.mu.Unlock()
				return
			}
			if p.drain != d || len(p.parked) == 0 || p.parked[0] != pf || p.reg != pf.h || p.state != stateReady || p.halted {
				p.mu.Unlock()
				p.releaseLocked(need)
				continue
			}
			lim.Admit = func(int) bool { return true }
			e, err = delivery.Parse(pf.f.Metadata, pf.f.Payload, pf.cmd.GetAckSet(), lim)
			admitted = need
		}
		p.heldBytes = max(0, p.heldBytes-pf.held)
		pf.held, pf.delivering = 0, true
		a := p.arrivalLocked(pf.h, pf.cmd, pf.f, &e, 0, admitted)
		p.deliverUnlock(a, pf.cmd, pf.frameErr, err)
		p.releaseLocked(a.admitted)
		p.mu.Lock()
		if len(p.parked) > 0 && p.parked[0] == pf {
			p.parked[0] = nil
			p.parked = p.parked[1:]
		}
		p.mu.Unlock()
	}
}

// drainer is the running drainParked of a partition; wake ends its wait for room
// (wakeDrainLocked).
type drainer struct {
	cancel context.CancelFunc
	wake   chan struct{}
}

// roomForParkedLocked takes need bytes of the budget for the first parked entry (p.mu
// released while it waits): as soon as the budget has room for them, or at once,
// beyond the budget if need be, when the partition holds nothing else of it
// (aloneLocked), as a partition reassembling a chunked message does. So an entry larger
// than the budget is not starved by other streams' traffic, and a partition exceeds the
// budget by one entry at most. It does not wait in the budget's line (Acquire): there
// it would hold up every stream's acquisitions behind an entry that only its own
// application's reading can make room for. It is tried again whenever the partition's
// application takes a message, an entry lands, and every tick of the run loop; it
// reports false when ctx ended.
func (p *partitionConsumer) roomForParkedLocked(ctx context.Context, d *drainer, wl waitLimiter, need int) bool {
	for {
		if wl.TryAcquire(int64(need)) {
			return true
		}
		if p.aloneLocked() {
			p.opts.MemoryLimiter.Charge(int64(need))
			return true
		}
		p.mu.Unlock()
		select {
		case <-d.wake:
		case <-ctx.Done():
		}
		p.mu.Lock()
		if ctx.Err() != nil {
			return false
		}
	}
}

// aloneLocked: the partition holds nothing of the budget (nothing of it queued beyond
// what is parked, nothing reserved for permits in flight) and the application holds no
// message taken with KeepMemoryCharge unsettled.
func (p *partitionConsumer) aloneLocked() bool {
	parked := 0
	for _, pf := range p.parked {
		parked += pf.held
	}
	return p.heldBytes-parked <= 0 && p.reserved == 0 && !p.c.holding()
}

// wakeDrainLocked has the drainer, if it waits for room, look again.
func (p *partitionConsumer) wakeDrainLocked() {
	if d := p.drain; d != nil {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// chargeFrom gives msgs their MemoryLimiter charge out of admitted bytes already taken
// for them (so their bytes are counted throughout) and returns what is left of admitted.
func chargeFrom(admitted int, msgs ...*Message) int {
	for _, m := range msgs {
		c := min(admitted, m.size-m.charged)
		if c <= 0 {
			continue
		}
		m.charged += c
		admitted -= c
	}
	return admitted
}
