package pulsar

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func (p *partitionProducer) receipt(h *handle, r *pb.CommandSendReceipt) {
	p.mu.Lock()
	cn := h.cn
	if p.reg != h || p.state != stateReady || len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	seq := r.GetSequenceId()
	if p.drain != nil {
		p.drainReceiptLocked(cn, seq, r.GetMessageId())
		return
	}
	head := p.pending[0]
	switch {
	case seq < head.seq:
		p.mu.Unlock() // a receipt for something already completed or timed out
		return
	case seq > head.seq:
		p.mu.Unlock()
		cn.Abort(fmt.Errorf("receipt for sequence %d while %d is the oldest pending on %s: resending", seq, head.seq, p.topic))
		return
	}
	head.settled, head.answer = true, r.GetMessageId()
	p.progressed = true
	done := p.popSettledLocked()
	p.flushIfRoomLocked()
	p.mu.Unlock()
	p.completeSettled(done)
}

// flushIfRoomLocked sends the open batch when the window has room for it. sendAsync looks
// only when a message comes, so wherever entries leave the window (a receipt, a refusal
// for good, a new connection after a drain) what accumulated behind it leaves now, not
// after BatchingMaxDelay.
func (p *partitionProducer) flushIfRoomLocked() {
	if len(p.batch.reqs) > 0 && p.brokerKeepsUpLocked() {
		p.flushBatchLocked()
	}
}

// settledItems are items taken off the queue: their completions, and what they held of
// the limiter.
type settledItems struct {
	fns  []completion
	n, b int
}

// popSettledLocked takes the settled items at the head of the queue off it, in order: the
// one a receipt just answered, and those stored behind a refused one (see drain).
func (p *partitionProducer) popSettledLocked() settledItems {
	var s settledItems
	for len(p.pending) > 0 && p.pending[0].settled {
		it := p.pending[0]
		p.popAnsweredLocked() // settled: answered by the broker, on this connection or one drained before
		if s.fns == nil {
			s.fns = make([]completion, 0, len(it.reqs))
		}
		s.fns = p.settle(s.fns, it)
		s.n += it.numMsgs
		s.b += it.bytes
	}
	return s
}

// completeSettled releases what s held and runs its callbacks (p.mu not held).
func (p *partitionProducer) completeSettled(s settledItems) {
	if s.n > 0 || s.b > 0 {
		p.limiter.release(s.n, s.b)
	}
	if len(s.fns) > 0 {
		p.cbs.push(s.fns...) // p.cbs is set once the first registration is done
	}
}

// settle appends the completions of the settled item it: its failure, or the id the
// broker answered it with.
func (p *partitionProducer) settle(fns []completion, it *pendingItem) []completion {
	if it.err != nil {
		for _, req := range it.reqs {
			fns = deliver(fns, req, MessageID{}, it.err)
		}
		return fns
	}
	if it.corrupt && messageIDFromPB(it.answer, p.partition).Duplicate() {
		err := fmt.Errorf("%w: sequence %d on %s was refused with ChecksumError and later messages were stored before it was resent",
			ErrCorruptInTransit, it.seq, p.topic)
		if p.opts.Deduplication {
			// The caller's own sequence id: sending it again can only be dropped.
			err = fmt.Errorf("%w (%w)", err, ErrSequenceUsed)
		}
		for _, req := range it.reqs {
			fns = deliver(fns, req, MessageID{}, err)
		}
		return fns
	}
	for i, req := range it.reqs {
		id := messageIDFromPB(it.answer, p.partition)
		if it.batched {
			id.BatchIndex = int32(i)
			id.BatchSize = int32(len(it.reqs))
		} else {
			id.BatchIndex = -1
		}
		fns = deliver(fns, req, id, nil)
	}
	return fns
}

// popAnsweredLocked is popLocked for the item the broker answered (a receipt or a
// refusal of it, on this connection or one drained after a refusal: see drain): the
// broker read the whole frame, so the connection wrote it and refers to it no more, and
// it is never resent; its batch buffer can hold a new batch.
// An item taken off for any other reason (a send timeout) may still be queued on a
// stalled connection: its buffer is left to the collector.
func (p *partitionProducer) popAnsweredLocked() {
	if it := p.pending[0]; it.buf != nil {
		putBatchBuf(it.buf)
		it.buf, it.frame = nil, nil
	}
	p.popLocked()
}

func (p *partitionProducer) popLocked() {
	p.pendingMsgs -= max(p.pending[0].numMsgs, 1)
	p.pending[0] = nil
	p.pending = p.pending[1:]
	p.progressLocked()
}

// progressLocked wakes the flushes waiting for pending to shrink. The channel is made
// only by a flush that waits: made afresh at every receipt, it was an allocation per
// entry for a producer nobody flushes, the bridge's.
func (p *partitionProducer) progressLocked() {
	if p.progress != nil {
		close(p.progress)
		p.progress = nil
	}
}

func (p *partitionProducer) sendError(h *handle, e *pb.CommandSendError) {
	se := &ServerError{Code: ServerErrorCode(e.GetError()), Message: e.GetMessage()}
	switch e.GetError() {
	case pb.ServerError_NotAllowedError:
		// A refusal of this one message (above the topic's maxMessageSize, say): fail it
		// and go on, as the Java client does.
		p.refuseHead(h, e.GetSequenceId(), se)
	case pb.ServerError_TopicTerminatedError, pb.ServerError_ProducerFenced:
		p.fail(fmt.Errorf("%w: sequence %d on %s: %w", ErrProducerFailed, e.GetSequenceId(), p.topic, fenced(se)))
	default:
		// ChecksumError (the frame was damaged on the way) and the refusals that call for
		// a new connection: read the answers to what was written before resending.
		p.refused(h, e.GetSequenceId(), se)
	}
}

// refuseHead fails the item the broker answers next, whose sequence id it refused for
// good; the producer goes on with the next. A refusal of anything else is out of step
// with the queue: the connection is reset so everything pending is sent again.
func (p *partitionProducer) refuseHead(h *handle, seq uint64, se *ServerError) {
	cn := h.cn
	err := fmt.Errorf("pulsar: the broker refused sequence %d on %s: %w", seq, p.topic, se)
	if strings.Contains(strings.ToLower(se.Message), "size") {
		err = fmt.Errorf("%w: %w", ErrMessageTooLarge, err) // the topic's maxMessageSize
	}
	p.mu.Lock()
	it := p.nextUnansweredLocked()
	if p.reg != h || it == nil || !it.refusedAs(seq) {
		var done settledItems
		if p.drain != nil && p.reg == h {
			done = p.endDrainLocked()
		}
		p.mu.Unlock()
		p.completeSettled(done)
		cn.Abort(fmt.Errorf("SEND_ERROR %s for sequence %d, which is not the oldest pending on %s: resending", se.Code, seq, p.topic))
		return
	}
	it.settled, it.err = true, err
	p.answeredLocked(cn, it)
}

// fail stops the producer for good: every pending and future message fails with err.
func (p *partitionProducer) fail(err error) { p.failAfter(nil, err) }

// failAfter is fail, failing first the items taken off the queue already.
func (p *partitionProducer) failAfter(first []*pendingItem, err error) { p.stop(first, err, false) }

// failReconnecting is fail for a producer whose reconnection was refused for good: what
// was sent on the lost connection without a receipt may have been stored, so it fails
// with ErrOutcomeUnknown (temporary: a resend tells), not with the refusal, which holds
// only for what is sent from now on. Only the open batch, never sent, fails with err.
func (p *partitionProducer) failReconnecting(err error) { p.stop(nil, err, true) }

// stop fails the producer for good with err; with unsettled, the pending items (sent,
// without a receipt) fail with ErrOutcomeUnknown wrapping err instead.
func (p *partitionProducer) stop(first []*pendingItem, err error, unsettled bool) {
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		p.failItems(first, err)
		return
	}
	p.failed = err
	p.state = stateFailed
	cn := p.cn // set only when ready
	if p.reg != nil {
		p.detachLocked(p.reg)
	}
	sent := len(p.pending)
	items := append(first, p.takeAllLocked()...)
	p.mu.Unlock()
	if cn != nil {
		reqID := p.client.nextRequestID()
		_ = cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
			CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(reqID)}})
	}
	p.log.Error("producer failed", "error", err)
	if unsettled && sent > 0 {
		// takeAllLocked returns the pending items first, then the open batch.
		p.failItems(items[len(first):len(first)+sent], fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
		items = append(items[:len(first):len(first)], items[len(first)+sent:]...)
	}
	p.failItems(items, err)
}

// takeAllLocked removes the open batch and every pending item.
func (p *partitionProducer) takeAllLocked() []*pendingItem {
	items := p.pending
	p.pending, p.pendingMsgs = nil, 0
	if len(p.batch.reqs) > 0 {
		items = append(items, &pendingItem{reqs: p.batch.reqs, numMsgs: len(p.batch.reqs), bytes: p.batch.acquired})
		p.batch = batch{}
	}
	p.progressLocked()
	return items
}

func (p *partitionProducer) failItems(items []*pendingItem, err error) {
	var fns []completion
	n, b := 0, 0
	for _, it := range items {
		n += it.numMsgs
		b += it.bytes
		if it.settled {
			// Stored (or failed) already, behind a refused item: its own outcome stands.
			fns = p.settle(fns, it)
			continue
		}
		for _, req := range it.reqs {
			fns = deliver(fns, req, MessageID{}, err)
		}
	}
	p.limiter.release(n, b)
	p.cbs.push(fns...)
}

func (p *partitionProducer) failTimedOut(now time.Time) {
	if p.opts.SendTimeout <= 0 {
		return
	}
	p.mu.Lock()
	var expired []*pendingItem
	for len(p.pending) > 0 && now.Sub(p.pending[0].created) > p.opts.SendTimeout {
		expired = append(expired, p.pending[0])
		p.popLocked()
	}
	if len(expired) == 0 {
		p.mu.Unlock()
		return
	}
	err := fmt.Errorf("%w: %s without a receipt from %s", ErrSendTimeout, p.opts.SendTimeout, p.topic)
	if p.opts.Deduplication {
		p.mu.Unlock()
		// Nothing queued behind a message that may be lost may reach the broker before it
		// is sent again: the broker would then drop the resent one as a duplicate.
		p.failAfter(expired, fmt.Errorf("%w; the producer stops, failing what was queued behind it", err))
		return
	}
	// Everything queued behind the message that timed out fails with it, as the Java
	// client's send timeout fails every pending message and the open batch: kept and
	// resent after a reconnection, they would be stored after the resends of the failed
	// ones by their callers, out of the order those callers gave. The producer goes on.
	expired = append(expired, p.takeAllLocked()...)
	// A drain after a refusal waited for answers to items that have just failed: nothing
	// is left to read, and new messages would wait for its timer. The connection is reset
	// now, so they go out on the next one.
	d := p.drain
	p.stopDrainLocked()
	p.mu.Unlock()
	if d != nil {
		d.h.cn.Abort(fmt.Errorf("%w (the entries written behind it timed out)", d.reason))
	}
	p.failItems(expired, err)
}

// quotaRefusal applies a backlog quota refusal of the registration: with the
// producer_exception policy (ProducerBlockedQuotaExceededException) what is pending
// fails at once with the (temporary) error, and so do new sends until the producer is
// registered again; with producer_request_hold (ProducerBlockedQuotaExceededError)
// messages wait, subject to the send timeout. The producer keeps reconnecting either way.
func (p *partitionProducer) quotaRefusal(err error) {
	var se *ServerError
	if !errors.As(err, &se) || se.Code != ServerErrorCode(pb.ServerError_ProducerBlockedQuotaExceededException) {
		return
	}
	qerr := fmt.Errorf("pulsar: %s: the topic's backlog quota is exceeded; retry later: %w", p.topic, se)
	p.mu.Lock()
	if p.failed != nil || p.closing {
		p.mu.Unlock()
		return
	}
	p.quotaErr = qerr
	items := p.takeAllLocked()
	p.mu.Unlock()
	p.failItems(items, qerr)
}
