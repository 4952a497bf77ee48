package pulsar

import (
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func (p *partitionConsumer) flowLocked(n int) {
	// The broker reads message_permits as a Java int and refuses (closing the
	// connection) anything above 2^31-1: a large return (a discarded hostile batch
	// claims up to that many) goes in several FLOWs.
	for n > 0 && p.cn != nil {
		k := min(n, math.MaxInt32)
		if p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
			ConsumerId: proto.Uint64(p.id), MessagePermits: proto.Uint32(uint32(k))}}) != nil {
			return
		}
		p.permitsGranted += k
		n -= k
	}
}

// taken is called when the application takes m: its permits return to the broker once
// half the window is free (and, with ReceiverQueueBytes, as the byte bound allows).
func (p *partitionConsumer) taken(m *Message) {
	p.mu.Lock()
	if m.gen == p.gen {
		p.heldBytes = max(0, p.heldBytes-m.size)
	}
	p.returnPermitsLocked(m.permits)
	p.wakeDrainLocked()
	p.mu.Unlock()
}

func (p *partitionConsumer) returnPermitsLocked(n int) {
	p.permitsTaken += n
	if p.byteMode() {
		p.grantLocked()
		return
	}
	if p.permitsTaken >= max(1, p.opts.ReceiverQueueSize/2) {
		p.flowLocked(p.permitsTaken)
		p.permitsTaken = 0
	}
}

// byteMode: permits are granted by grantLocked, in bytes (ReceiverQueueBytes and/or a
// MemoryLimiter), rather than in halves of the window.
func (p *partitionConsumer) byteMode() bool {
	return p.opts.ReceiverQueueBytes > 0 || p.opts.MemoryLimiter != nil
}

// minPermitBytes is the least a permit is assumed to bring: a permit in flight may bring
// an entry of any size (the broker sends whatever is next), so however small the entries
// so far, no more than ReceiverQueueBytes/minPermitBytes permits are out at once, and a
// backlog that goes from small entries to ones of up to this size cannot multiply the
// window by the jump.
const minPermitBytes = 8 << 10

// permitBytesLocked is the bytes a permit in flight is assumed to bring: the largest an
// arrival brought per permit lately (it rises at once, and falls by an eighth of the gap
// per smaller arrival), never less than minPermitBytes; 0 until the first arrival.
func (p *partitionConsumer) permitBytesLocked() int {
	if p.bytesPerPermit == 0 {
		return 0
	}
	return max(p.bytesPerPermit, minPermitBytes)
}

// grantLocked sends the broker as many of the withheld permits as the byte bound has
// room for: the bytes queued, plus the permits in flight at the bytes an arrival may
// bring per permit (permitBytesLocked), stay within ReceiverQueueBytes; with a MemoryLimiter, the permits granted
// are also reserved from it at that estimate (as many as it can cover). With nothing
// queued and nothing in flight one permit always goes (charged to the limiter even
// beyond its limit), so a message larger than the bound is still delivered and the flow
// never stalls; until the first arrival tells the size, one permit goes at a time.
//
// inFlight is the broker's count of permits: it goes below zero when a batch brought
// more messages than there were permits left (the broker sends whole entries), and the
// broker takes that debt out of the next permits, so they are granted on top.
func (p *partitionConsumer) grantLocked() {
	if p.permitsTaken <= 0 || p.cn == nil {
		return
	}
	bound := p.opts.ReceiverQueueBytes
	if bound <= 0 {
		bound = math.MaxInt
	}
	out, debt := max(p.inFlight, 0), max(-p.inFlight, 0)
	k := 0
	per := p.permitBytesLocked()
	if per > 0 {
		// The permits in flight count at the current estimate, or at what was reserved
		// for them when an earlier (larger) estimate granted them.
		if room := bound - p.heldBytes - max(out*per, p.reserved); room > 0 {
			k = room / per
		}
	}
	idle := p.heldBytes == 0 && out == 0
	k = min(k, p.permitsTaken-debt)
	if !idle && per > 0 {
		// Not a FLOW per message taken: permits go once half the window (in bytes, or
		// in messages) is free, as they do without a byte bound.
		if k < max(1, min(p.opts.ReceiverQueueSize/2, bound/2/per)) {
			return
		}
	}
	if lim := p.opts.MemoryLimiter; lim != nil && k > 0 {
		// As many as the shared budget can cover now: halve until they fit, then add
		// one at a time while they still do.
		unit, want := max(per, 1), k
		for k > 0 && !lim.TryReserve(int64(k)*int64(unit)) {
			k /= 2
		}
		for k > 0 && k < want && lim.TryReserve(int64(unit)) {
			k++
		}
		p.reserved += k * unit
		p.reservedAt = time.Now()
	}
	if k < 1 && idle {
		// Beyond the limiter only for a partition reassembling at most one chunked
		// message: its chunks' permits go back as they arrive, so a message larger than
		// the budget still completes. One reassembling more gets its permit only as far
		// as the limiter covers it, and waits for room otherwise (see chargeChunkLocked).
		// While the application holds a message taken with KeepMemoryCharge
		// (Consumer.Settled), only in the middle of one chunked message (the last entry
		// to land was its non-final chunk): between messages, what each such permit
		// brought would be taken and held, the partition idle again, without bound (a
		// chunked message whose producer died keeps len(p.chunks) at 1 for ChunkExpiry).
		// Otherwise one permit as far as the limiter covers it: at the estimate, or at
		// the smallest one when that does not fit (one large message raised the
		// estimate, and only arrivals bring it down: none would come).
		unit := max(per, 1)
		res := unit
		holding := p.c.holding()
		switch lim := p.opts.MemoryLimiter; {
		case lim == nil:
			k = 1
		case len(p.chunks) == 1 && (!holding || p.midChunk) || len(p.chunks) == 0 && !holding:
			lim.Charge(int64(unit))
			k = 1
		case lim.TryReserve(int64(unit)):
			k = 1
		case len(p.chunks) == 0 && lim.TryReserve(int64(min(unit, minPermitBytes))):
			res, k = min(unit, minPermitBytes), 1
		}
		if k == 1 && p.opts.MemoryLimiter != nil {
			p.reserved += res
			p.reservedAt = time.Now()
		}
	}
	if k < 1 {
		return // granted again as the application takes messages
	}
	g := min(k+debt, p.permitsTaken)
	p.flowLocked(g)
	p.permitsTaken -= g
	p.inFlight += g
}

// starvedLocked: the partition holds nothing, has no permits in flight and withholds
// some, so only a grant can bring it anything.
func (p *partitionConsumer) starvedLocked() bool {
	return p.cn != nil && p.heldBytes == 0 && p.inFlight <= 0 && p.permitsTaken > 0
}

// landedLocked accounts an entry that used n permits: beyond them, the broker's count
// goes below zero (see grantLocked). It returns the entry's share of the limiter's
// reservation for the permits in flight, which the caller gives back with
// unreserveShareLocked once the entry's messages are charged (never before: in between
// their bytes would be counted nowhere, and a grant could take that room).
func (p *partitionConsumer) landedLocked(n int) (share int) {
	if !p.byteMode() {
		return 0
	}
	p.reservedAt = time.Now()
	if out := p.inFlight; out > 0 {
		used := min(n, out)
		share = p.reserved
		if used < out {
			share = p.reserved * used / out
		}
		p.reserved -= share
	}
	p.inFlight -= n
	return share
}

// unreserveShareLocked returns to the limiter a landed entry's share of the reservation.
func (p *partitionConsumer) unreserveShareLocked(share int) {
	if lim := p.opts.MemoryLimiter; lim != nil && share > 0 {
		lim.Release(int64(share))
	}
}

// reservationIdle is how long a reservation for permits in flight is kept with nothing
// arriving on them. The broker keeps the permits (they cannot be taken back), but a quiet
// topic may never use them: held for good, the reservation kept the shared budget spent
// and every other user of it waiting. What they bring later is charged as it arrives.
var reservationIdle = time.Second

// releaseIdleLocked returns the reservation of permits in flight that brought nothing
// for reservationIdle; they stay counted in flight, so no more are granted for them.
func (p *partitionConsumer) releaseIdleLocked(now time.Time) {
	if p.reserved > 0 && now.Sub(p.reservedAt) >= reservationIdle {
		if lim := p.opts.MemoryLimiter; lim != nil {
			lim.Release(int64(p.reserved))
		}
		p.reserved = 0
	}
}

// unreserveLocked returns the whole reservation: the permits in flight are void (the
// registration was lost, or the consumer closes).
func (p *partitionConsumer) unreserveLocked() {
	if lim := p.opts.MemoryLimiter; lim != nil && p.reserved > 0 {
		lim.Release(int64(p.reserved))
	}
	p.reserved, p.inFlight = 0, 0
}

// chargeLocked charges the limiter for messages about to be queued; the Consumer
// releases the charge when the application takes them or the queue drops them.
func (p *partitionConsumer) chargeLocked(msgs ...*Message) {
	lim := p.opts.MemoryLimiter
	if lim == nil {
		return
	}
	for _, m := range msgs {
		// A whole chunked message comes with its chunks' charge already.
		switch d := m.size - m.charged; {
		case d > 0:
			lim.Charge(int64(d))
		case d < 0:
			lim.Release(int64(-d))
		}
		m.charged = m.size
	}
}

// arrivedLocked accounts an entry that brought bytes to the queue (sample: its bytes
// per permit, 0 when it tells nothing); the permits it used were accounted by
// landedLocked.
func (p *partitionConsumer) arrivedLocked(held, sample int) {
	p.heldBytes += held
	if sample > 0 {
		if sample >= p.bytesPerPermit {
			p.bytesPerPermit = sample
		} else {
			p.bytesPerPermit -= (p.bytesPerPermit - sample + 7) / 8
		}
	}
	if p.byteMode() {
		// The window fills up to the bound without waiting for the application: the
		// first arrival tells the size, and later ones may leave room the estimate allows.
		p.grantLocked()
	}
}

// releaseLocked returns n bytes to the MemoryLimiter, if any.
func (p *partitionConsumer) releaseLocked(n int) {
	if lim := p.opts.MemoryLimiter; lim != nil && n > 0 {
		lim.Release(int64(n))
	}
}
