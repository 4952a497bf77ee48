package pulsar

import (
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/delivery"
	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/framepool"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// discardLocked drops an entry before delivery: it is reported to the broker (when
// validation failed) and its permits are returned so the flow never stalls.
func (p *partitionConsumer) discardLocked(cn *conn.Conn, id *pb.MessageIdData, permits int, why pb.CommandAck_ValidationError, report bool) {
	p.discarded += permits
	if report && cn != nil {
		_ = cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
			ConsumerId: proto.Uint64(p.id), AckType: pb.CommandAck_Individual.Enum(),
			MessageId:       []*pb.MessageIdData{{LedgerId: id.LedgerId, EntryId: id.EntryId}},
			ValidationError: why.Enum()}})
	}
	p.returnPermitsLocked(permits)
}

// message decodes one MESSAGE frame on the connection's reader goroutine. Whatever the
// frame holds, it costs at most one discarded message: delivery.Parse validates it. An
// entry that decompresses to more than the broker's limit is decompressed here only if
// the MemoryLimiter has room for it now; otherwise it is parked as stored, and so is
// everything after it on the partition, until parkedDrain delivers them in order.
func (p *partitionConsumer) message(h *consumerHandle, cmd *pb.CommandMessage, f *frame.Frame, frameErr error) {
	p.mu.Lock()
	if p.reg != h || p.state != stateReady {
		p.mu.Unlock()
		return // from a connection we left
	}
	if p.halted {
		p.mu.Unlock()
		return // stopped by an encrypted message: nothing after it is delivered
	}
	if p.droppedDuringSeekLocked(h, f) {
		p.mu.Unlock()
		return // sent before the seek moved the cursor: from the old position
	}
	p.progressed = true
	lim := p.limitsLocked()
	lim.DeferAll = len(p.parked) > 0
	admitted := 0
	if wl := p.waitLimiter(); wl != nil && !lim.DeferAll {
		lim.Admit = func(n int) bool {
			if wl.TryAcquire(int64(n)) {
				admitted = n
				return true
			}
			return false
		}
	}
	e, err := delivery.Parse(f.Metadata, f.Payload, cmd.GetAckSet(), lim)
	share := p.landedLocked(max(e.Permits, 1))
	if lim.DeferAll || frameErr == nil && err == nil && e.Kind == delivery.Deferred {
		p.unreserveShareLocked(share)
		p.parkLocked(h, cmd, f, frameErr, max(e.Permits, 1))
		p.mu.Unlock()
		return
	}
	a := p.arrivalLocked(h, cmd, f, &e, share, admitted)
	a.buf = f.Buf // adoptable here, on the reader, not from the parked drain
	p.deliverUnlock(a, cmd, frameErr, err)
	p.releaseLocked(a.admitted) // what the messages were not charged from it
}

// arrivalLocked makes the arrival of a parsed entry.
func (p *partitionConsumer) arrivalLocked(h *consumerHandle, cmd *pb.CommandMessage, f *frame.Frame, e *delivery.Entry, share, admitted int) *arrival {
	id := cmd.GetMessageId()
	md := e.Metadata
	return &arrival{
		cn: h.cn, id: id, mid: messageIDFromPB(id, p.partition), e: e, f: f,
		share: share, admitted: admitted,
		base: Message{
			Topic: p.topic, ProducerName: md.GetProducerName(), RedeliveryCount: cmd.GetRedeliveryCount(),
			PublishTime: time.UnixMilli(int64(md.GetPublishTime())), SchemaVersion: md.GetSchemaVersion(), pc: p,
		},
	}
}

// deliverUnlock hands up (or acknowledges as undecodable) a parsed arrival; p.mu is
// released when it returns.
func (p *partitionConsumer) deliverUnlock(a *arrival, cmd *pb.CommandMessage, frameErr, err error) {
	de := (*delivery.Error)(nil)
	if frameErr != nil || errors.As(err, &de) {
		p.undecodableUnlock(a, frameErr, err, de)
		return
	}
	p.midChunk = false
	switch a.e.Kind {
	case delivery.Encrypted:
		p.encryptedUnlock(a)
	case delivery.Chunk:
		p.chunkUnlock(a)
	case delivery.Single:
		p.singleUnlock(a)
	default:
		p.batchUnlock(a, cmd.GetAckSet())
	}
}

// arrival is one MESSAGE frame being handled: where it came from and what it holds.
type arrival struct {
	cn    *conn.Conn
	id    *pb.MessageIdData
	mid   MessageID
	e     *delivery.Entry
	f     *frame.Frame
	share int // the memory reservation's share landedLocked gave it
	// admitted: bytes taken from the MemoryLimiter for the entry decompressed beyond the
	// broker's limit; its messages' charge comes out of them (chargeLocked), and the
	// rest goes back once the arrival is handled.
	admitted int
	base     Message // the fields every message of the entry shares
	// buf: the frame's pooled buffer, for the messages that point into it to adopt
	// (adopt); nil when it was allocated or must not be adopted (a parked frame).
	buf *framepool.Buf
}

// adopt makes msgs, all of the arrival's frame, the holders of its pooled buffer, each
// to release it once (Message.Release). Messages never released, and frames never
// adopted, are left to the collector.
func (a *arrival) adopt(msgs ...*Message) {
	if a.buf == nil || len(msgs) == 0 {
		return
	}
	a.buf.Adopt(len(msgs))
	for _, m := range msgs {
		m.buf = a.buf
	}
	a.buf = nil
}

// The ...Unlock methods below finish an arrival with p.mu held and release it once
// they handed its messages to the application's queue (or before they fail the
// partition). Queued under p.mu, the messages cannot reach the queue after a loss of
// their registration emptied it (connectionLost takes p.mu before Consumer.removeFrom):
// the partition's drainer hands parked entries up on a goroutine
// of its own, beside the connection's reader that handles CLOSE_CONSUMER. The lock
// order is p.mu, then Consumer.mu; Consumer.mu is never held while p.mu is taken.

// undecodableUnlock handles an entry that failed its checksum or did not decode: it is
// delivered as stored (DeliverUndecodable) or acknowledged with the validation error.
func (p *partitionConsumer) undecodableUnlock(a *arrival, frameErr, err error, de *delivery.Error) {
	why := pb.CommandAck_ChecksumMismatch
	if frameErr != nil {
		err = frameErr
	} else {
		why = de.Reason
	}
	ue := &UndecodableError{Topic: p.topic, ID: a.mid, Reason: undecodableReason(frameErr, a.e.Metadata, why), Err: err}
	ue.ID.BatchIndex, ue.ID.BatchSize = -1, 0
	if p.opts.DeliverUndecodable {
		p.deliverStoredUnlock(a, ue, ue, "delivered as stored")
		return
	}
	p.noteUndecodableLocked(ue, "acknowledged with a validation error")
	if frameErr != nil {
		p.checksumFailures++
	} else {
		p.malformed++
	}
	p.unreserveShareLocked(a.share)
	p.discardLocked(a.cn, a.id, a.e.Permits, why, true)
	p.mu.Unlock()
}

// deliverStoredUnlock hands the entry up as stored, not decoded (with ue, if any, on
// the message), noting why.
func (p *partitionConsumer) deliverStoredUnlock(a *arrival, ue, noted *UndecodableError, action string) {
	m := p.storedLocked(a.base, a.mid, ue, a.f, a.e.Metadata, a.e.Permits)
	p.noteUndecodableLocked(noted, action)
	p.chargeLocked(m)
	p.unreserveShareLocked(a.share)
	p.arrivedLocked(m.size, max(m.size/m.permits, 1))
	p.c.enqueue([]*Message{m})
	p.mu.Unlock()
}

// encryptedUnlock handles an encrypted entry by CryptoFailureAction.
func (p *partitionConsumer) encryptedUnlock(a *arrival) {
	ue := &UndecodableError{Topic: p.topic, ID: a.mid, Reason: ReasonEncrypted}
	ue.ID.BatchIndex, ue.ID.BatchSize = -1, 0
	switch p.opts.CryptoFailureAction {
	case CryptoConsume:
		p.deliverStoredUnlock(a, nil, ue, "delivered encrypted")
	case CryptoDiscard:
		p.noteUndecodableLocked(ue, "acknowledged with a validation error")
		p.unreserveShareLocked(a.share)
		p.discardLocked(a.cn, a.id, a.e.Permits, pb.CommandAck_DecryptionError, true)
		p.mu.Unlock()
	default:
		// Neither delivered nor acknowledged: it stays on the broker, and so does
		// everything after it (this registration takes no more; Close hands them back).
		p.noteUndecodableLocked(ue, "stopped the partition")
		p.unreserveShareLocked(a.share)
		p.halted = true
		p.mu.Unlock()
		p.c.partitionFailed(ue)
	}
}

// chunkUnlock adds a chunk to its message's reassembly and hands the message up once
// it is whole.
func (p *partitionConsumer) chunkUnlock(a *arrival) {
	p.midChunk = true
	msg := p.chunkLocked(a.cn, a.id, a.mid, a.e, a.base)
	p.midChunk = msg == nil && len(p.chunks) == 1
	if msg != nil {
		msg.gen = p.gen
		p.chargeLocked(msg)
	}
	p.unreserveShareLocked(a.share)
	if msg != nil {
		p.arrivedLocked(msg.size, 0)
	}
	p.arrivedLocked(0, len(a.f.Payload))
	if msg != nil {
		p.c.enqueue([]*Message{msg})
	}
	p.mu.Unlock()
}

// singleUnlock hands up an entry that holds one message, not batched.
func (p *partitionConsumer) singleUnlock(a *arrival) {
	if p.seekSkipsLocked(a.mid, 0) {
		p.seekSkipUnlock(a, 1)
		return
	}
	m := a.base
	m.ID = a.mid
	m.ID.BatchIndex = -1
	setFromMetadata(&m, a.e.Metadata)
	m.payload, m.size, m.permits = a.e.Payload, len(a.e.Payload), 1
	m.gen = p.gen
	a.admitted = chargeFrom(a.admitted, &m)
	p.chargeLocked(&m)
	p.unreserveShareLocked(a.share)
	p.arrivedLocked(m.size, max(m.size, 1))
	a.adopt(&m)
	p.c.enqueue([]*Message{&m})
	p.mu.Unlock()
}

// batchUnlock hands up the messages of a batch that are not acknowledged already (by
// the broker's ack set or this consumer's tracker), returning the permits of the rest.
func (p *partitionConsumer) batchUnlock(a *arrival, ackSet []int64) {
	if p.seekSkipsLocked(a.mid, a.e.BatchSize) {
		p.seekSkipUnlock(a, max(a.e.Permits, 1))
		return
	}
	ackSet = p.seekAckSetLocked(a.mid, a.e.BatchSize, ackSet)
	msgs, filtered := p.unbatchLocked(a.mid, a.e, ackSet, a.base)
	held := 0
	for _, m := range msgs {
		m.gen = p.gen
		held += m.size
	}
	a.admitted = chargeFrom(a.admitted, msgs...)
	p.chargeLocked(msgs...)
	p.unreserveShareLocked(a.share)
	p.arrivedLocked(held, max(held/max(a.e.Permits, 1), 1))
	if a.e.Skipped > 0 {
		p.discardLocked(nil, a.id, a.e.Skipped, 0, false)
	}
	if filtered > 0 {
		p.returnPermitsLocked(filtered)
	}
	a.adopt(msgs...)
	p.c.enqueue(msgs)
	p.mu.Unlock()
}

// storedLocked makes the message of an entry delivered as stored, not decoded: its
// payload is the entry's (f.Payload), its permits what the broker charged for the entry.
func (p *partitionConsumer) storedLocked(base Message, mid MessageID, ue *UndecodableError, f *frame.Frame, md *pb.MessageMetadata, permits int) *Message {
	m := base
	m.ID = mid
	m.ID.BatchIndex, m.ID.BatchSize = -1, 0 // the entry as a whole
	if md != nil {
		setFromMetadata(&m, md)
	}
	m.Undecodable, m.Stored = ue, storedEntry(f.Metadata, md)
	m.payload, m.size, m.permits = f.Payload, len(f.Payload), max(permits, 1)
	m.gen = p.gen
	return &m
}

// noteUndecodableLocked counts an entry that could not be decoded and logs it (at a
// bounded rate: see reasonLog).
func (p *partitionConsumer) noteUndecodableLocked(ue *UndecodableError, action string) {
	p.undecodable[ue.Reason]++
	p.undecodableLog.note(p.log, time.Now(), ue, action)
}

// limitsLocked bounds what one delivery may make this consumer allocate.
func (p *partitionConsumer) limitsLocked() delivery.Limits {
	return delivery.Limits{MaxMessageSize: p.cn.MaxMessageSize(), MaxChunkedMessageSize: p.opts.MaxChunkedMessageSize}
}

func setFromMetadata(m *Message, md *pb.MessageMetadata) {
	m.Key = md.GetPartitionKey()
	m.OrderingKey = md.GetOrderingKey()
	if t := md.GetEventTime(); t > 0 {
		m.EventTime = time.UnixMilli(int64(t))
	}
	if len(md.GetProperties()) > 0 {
		m.Properties = make(map[string]string, len(md.GetProperties()))
		for _, kv := range md.GetProperties() {
			m.Properties[kv.GetKey()] = kv.GetValue()
		}
	}
}

// unbatchLocked turns a validated batch into messages and tracks its acknowledgement.
// An entry that comes again while its tracker is kept (see batchTracker) brings only
// what the tracker lets through; filtered counts the rest, whose permits the caller
// returns (once the arrival is accounted).
func (p *partitionConsumer) unbatchLocked(mid MessageID, e *delivery.Entry, ackSet []int64, base Message) (msgs []*Message, filtered int) {
	n := e.BatchSize
	key := entryKey{uint64(mid.LedgerID), uint64(mid.EntryID)}
	t := p.trackers[key]
	handedBack := false
	if t != nil {
		if len(ackSet) > 0 {
			for i := range t.bits {
				if i < len(ackSet) {
					t.bits[i] &= ackSet[i]
				} else {
					t.bits[i] = 0
				}
			}
		}
		handedBack = !t.handedBack.IsZero()
	} else if n > 1 {
		t = newBatchTracker(n, ackSet)
		t.base = base.RedeliveryCount
		p.trackers[key] = t
	}
	msgs = make([]*Message, 0, len(e.Messages))
	// The batch's messages are one allocation, not one each: they live as long as the
	// frame their payloads point into does anyway.
	store := make([]Message, 0, len(e.Messages))
	for i := range e.Messages {
		bm := &e.Messages[i]
		smd := &bm.Metadata
		store = append(store, base)
		m := &store[len(store)-1]
		if t != nil {
			ok, count := t.deliver(bm.Index, handedBack, base.RedeliveryCount)
			if !ok {
				filtered++
				store = store[:len(store)-1]
				continue
			}
			m.RedeliveryCount = count
		}
		m.ID = mid
		m.ID.BatchIndex, m.ID.BatchSize = int32(bm.Index), int32(n)
		m.Key = smd.PartitionKey
		m.OrderingKey = smd.OrderingKey
		if t := smd.EventTime; t > 0 {
			m.EventTime = time.UnixMilli(int64(t))
		}
		if len(smd.Properties) > 0 {
			m.Properties = make(map[string]string, len(smd.Properties))
			for _, kv := range smd.Properties {
				m.Properties[kv.GetKey()] = kv.GetValue()
			}
		}
		m.payload, m.size, m.permits = bm.Payload, len(bm.Payload), 1
		msgs = append(msgs, m)
	}
	if t != nil {
		if handedBack {
			t.arrived()
		}
		if t.done() {
			delete(p.trackers, key) // acknowledged whole meanwhile (by the broker's ack_set)
		}
	}
	return msgs, filtered
}
