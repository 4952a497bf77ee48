package pulsar

import (
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// drain is a connection on which the broker refused an entry with an error that calls
// for a new connection (ChecksumError above all: the frame was damaged on the way).
// With several entries in flight, the entries written behind the refused one have been
// answered, or will be, on that connection: some stored, some refused too. Resetting at
// once would lose those answers, and an entry refused but unread would be resent
// unmarked: on a deduplicating topic, whose later entries were stored meanwhile, it is
// answered as a duplicate and would be reported sent though never stored.
//
// So nothing more is written on the connection, and every answer to what was written is
// read first: a refused entry is marked (a duplicate answer to its resend is then the
// loss it is), a stored one keeps the id it was stored under and is not sent again (a
// topic without deduplication would store it twice); it completes, in order, once the
// entries ahead of it do. Then the connection is reset and the refused and unanswered
// entries are resent. A broker that stops answering cannot hold the producer: after the
// operation timeout (or the send timeout, when shorter) the connection is reset anyway
// and whatever is unanswered is resent, as after any lost connection.
//
// The Java client (ProducerImpl.recoverChecksumError) does otherwise: it resends every
// pending message on the same connection at once, without reading what the broker
// answers to the entries behind the refused one; the first receipt for a later entry
// then looks out of order to it (ackReceived closes the connection), and everything
// pending is resent on the next. A refused message resent after later ones were stored
// gets a duplicate answer on a deduplicating topic, which Java reports as sent with the
// id -1:-1 although the broker never stored it. The bridge reports ErrCorruptInTransit.
type drain struct {
	h      *handle
	left   int   // entries written on the connection and not answered yet
	reason error // the refusal that resets the connection
	timer  *time.Timer
	// last is the last entry written on the connection: nothing queued behind it was.
	last *pendingItem
}

// nextUnansweredLocked is the oldest item sent on the current connection that the
// broker has not answered there: the one its next answer is for. Settled items were not
// sent on it.
func (p *partitionProducer) nextUnansweredLocked() *pendingItem {
	for _, it := range p.pending {
		if !it.settled && !it.answered {
			return it
		}
	}
	return nil
}

// refused handles a SEND_ERROR that calls for a new connection: it marks the refused
// item and drains the connection (see drain) before resetting it.
func (p *partitionProducer) refused(h *handle, seq uint64, se *ServerError) {
	cn := h.cn
	reason := fmt.Errorf("SEND_ERROR for sequence %d on %s: %w; reconnecting to resend", seq, p.topic, se)
	p.mu.Lock()
	if p.reg != h || p.state != stateReady {
		p.mu.Unlock()
		cn.Abort(reason)
		return
	}
	it := p.nextUnansweredLocked()
	if it == nil || !it.refusedAs(seq) {
		// Out of step with the queue (an answer skipped): mark what was refused and
		// reset now.
		for _, x := range p.pending {
			if !x.settled && x.refusedAs(seq) {
				refuse(x, se)
				break
			}
		}
		var done settledItems
		if p.drain != nil {
			done = p.endDrainLocked()
		}
		p.mu.Unlock()
		p.completeSettled(done)
		cn.Abort(reason)
		return
	}
	refuse(it, se)
	if p.drain == nil {
		d := &drain{h: h, reason: reason, left: 1, last: p.pending[len(p.pending)-1]}
		for _, x := range p.pending {
			if !x.settled && !x.answered && x != it {
				d.left++
			}
		}
		if d.left > 1 {
			after := p.drainTimeout()
			d.timer = time.AfterFunc(after, func() { p.drainExpired(d, after) })
		}
		p.drain = d
		p.log.Warn("the broker refused an entry; reading the answers to the entries written behind it before resending",
			"sequence", seq, "error", se, "awaited", d.left-1)
	}
	p.answeredLocked(cn, it)
}

// refusedAs reports whether a SEND_ERROR naming seq refuses it. A broker names a refused
// entry by its highest sequence id (for a batch, its last message's; Producer.publishMessage
// checks the entry under it, and a failed write answers the greater of the two), while
// the receipt of a stored one names the lowest.
func (it *pendingItem) refusedAs(seq uint64) bool {
	return seq == it.seq || seq == it.highestSeq
}

// refuse marks it refused by the broker on the connection it was last sent on.
func refuse(it *pendingItem, se *ServerError) {
	it.refusal = se
	if pb.ServerError(se.Code) == pb.ServerError_ChecksumError {
		it.corrupt = true
	}
}

// drainReceiptLocked places a receipt read while the connection is drained. It unlocks p.mu.
func (p *partitionProducer) drainReceiptLocked(cn *conn.Conn, seq uint64, ids *pb.MessageIdData) {
	it := p.nextUnansweredLocked()
	if it == nil || it.seq != seq {
		done := p.endDrainLocked()
		p.mu.Unlock()
		p.completeSettled(done)
		cn.Abort(fmt.Errorf("receipt for sequence %d on %s, drained after a refusal, out of step with what was written: resending", seq, p.topic))
		return
	}
	it.settled, it.answer = true, ids
	p.progressed = true
	p.answeredLocked(cn, it)
}

// answeredLocked counts the answer to it: on a drained connection, the last one awaited
// ends the drain and resets the connection. It unlocks p.mu.
func (p *partitionProducer) answeredLocked(cn *conn.Conn, it *pendingItem) {
	d := p.drain
	if d == nil {
		// Not drained (a refusal for good outside a drain): the producer goes on.
		done := p.popSettledLocked()
		p.flushIfRoomLocked()
		p.mu.Unlock()
		p.completeSettled(done)
		return
	}
	it.answered = true
	d.left--
	if d.left > 0 {
		done := p.popSettledLocked()
		p.mu.Unlock()
		p.completeSettled(done)
		return
	}
	done := p.endDrainLocked()
	p.mu.Unlock()
	p.completeSettled(done)
	cn.Abort(d.reason)
}

// drainTimeout bounds a drain: the operation timeout, or the send timeout when shorter.
func (p *partitionProducer) drainTimeout() time.Duration {
	after := p.client.opts.OperationTimeout
	if p.opts.SendTimeout > 0 && (after <= 0 || p.opts.SendTimeout < after) {
		after = p.opts.SendTimeout
	}
	if after <= 0 {
		after = 30 * time.Second
	}
	return after
}

// drainExpired resets a drained connection whose broker did not answer everything in time.
func (p *partitionProducer) drainExpired(d *drain, after time.Duration) {
	p.mu.Lock()
	if p.drain != d {
		p.mu.Unlock()
		return
	}
	left := d.left
	done := p.endDrainLocked()
	p.mu.Unlock()
	p.completeSettled(done)
	p.log.Warn("no answer to the entries written before a refusal; resetting the connection anyway", "unanswered", left, "after", after)
	d.h.cn.Abort(fmt.Errorf("%w (%d entries written before it unanswered after %s)", d.reason, left, after))
}

// endDrainLocked ends the drain: a refused chunk fails its message when a later chunk of
// the message written on the connection was stored, or may have been (its answer not
// read when the drain ends early: the connection lost, the timer expired). Resent, the
// refused chunk would be stored after it, and no consumer can assemble a message whose
// chunks are out of order; the message's later chunks fail with it and are not resent.
// Then what is settled at the head of the queue is taken off it. The caller resets the
// connection (or it is closed already).
func (p *partitionProducer) endDrainLocked() settledItems {
	written := len(p.pending)
	for i, it := range p.pending {
		if it == p.drain.last {
			written = i + 1
			break
		}
	}
	for i, it := range p.pending[:written] {
		if !it.chunk || !it.answered || it.settled {
			continue // refused on this connection: answered, not settled
		}
		for _, later := range p.pending[i+1 : written] {
			if !later.chunk || later.seq != it.seq {
				continue
			}
			stored := later.settled && later.err == nil
			if !stored && later.answered {
				continue // refused too: resent after it, in order
			}
			why := "after a later chunk of its message was stored"
			if !stored {
				why = "and the answer to a later chunk of its message was not read: it may be stored"
			}
			err := fmt.Errorf("pulsar: a chunk of sequence %d on %s was refused (%w) %s: the message cannot be assembled",
				it.seq, p.topic, it.refusal, why)
			if it.corrupt {
				err = fmt.Errorf("%w: %w", ErrCorruptInTransit, err)
			}
			it.settled, it.err = true, err
			for _, rest := range p.pending[i+1:] {
				if rest.chunk && rest.seq == it.seq && !rest.settled {
					rest.settled, rest.err = true, err
				}
			}
			break
		}
	}
	p.stopDrainLocked()
	return p.popSettledLocked()
}

// stopDrainLocked forgets the drain (its connection is reset or lost).
func (p *partitionProducer) stopDrainLocked() {
	if p.drain == nil {
		return
	}
	if p.drain.timer != nil {
		p.drain.timer.Stop()
	}
	p.drain = nil
	for _, it := range p.pending {
		it.answered = false
	}
}
