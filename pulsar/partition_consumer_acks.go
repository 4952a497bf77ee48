package pulsar

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// pendingNack is an entry some of whose messages were negatively acknowledged: it is
// asked back once the latest of their delays has passed (the broker redelivers whole
// entries, and none of them may come back before its own delay).
type pendingNack struct {
	due     time.Time
	indexes []int32 // batch indexes, or -1 for an entry's only message
}

// idData is a MessageIdData with its ledger and entry ids in one allocation: an ack
// per message made three (the message and its two optional fields), and with the
// slice that carried it a fourth, a good part of a consumer's cost per message.
type idData struct {
	pb            pb.MessageIdData
	ledger, entry uint64
}

// newIDData returns the MessageIdData of (ledger, entry), allocated once.
func newIDData(ledger, entry uint64) *pb.MessageIdData {
	d := &idData{ledger: ledger, entry: entry}
	d.pb.LedgerId, d.pb.EntryId = &d.ledger, &d.entry
	return &d.pb
}

// ackIDsLocked turns m into the entries to acknowledge, updating batch trackers. It
// returns nothing when m is part of a batch that is not wholly acknowledged yet and
// batch-index acknowledgements are off.
func (p *partitionConsumer) ackIDsLocked(m *Message) []*pb.MessageIdData {
	if len(m.chunkID) > 0 {
		ids := make([]*pb.MessageIdData, 0, len(m.chunkID))
		for _, c := range m.chunkID {
			ids = append(ids, newIDData(uint64(c.LedgerID), uint64(c.EntryID)))
		}
		return ids
	}
	id := newIDData(uint64(m.ID.LedgerID), uint64(m.ID.EntryID))
	if m.ID.BatchSize <= 1 || m.ID.BatchIndex < 0 {
		return []*pb.MessageIdData{id}
	}
	key := entryKey{uint64(m.ID.LedgerID), uint64(m.ID.EntryID)}
	t := p.trackers[key]
	if t == nil {
		// The entry was handed back to the broker since this message was delivered (a
		// reconnect, or a redelivery on a shared subscription whose tracker expired):
		// it comes again, perhaps to another consumer, so no tracker is kept for it.
		// With batch-index acks this index alone is acknowledged; without, it is not.
		if !p.opts.BatchIndexAck {
			return nil
		}
		one := newBatchTracker(int(m.ID.BatchSize), nil)
		one.clear(int(m.ID.BatchIndex))
		id.AckSet, id.BatchSize = one.bits, proto.Int32(int32(one.size))
		return []*pb.MessageIdData{id}
	}
	t.clear(int(m.ID.BatchIndex))
	if t.done() {
		delete(p.trackers, key)
		return []*pb.MessageIdData{id}
	}
	if !p.opts.BatchIndexAck {
		return nil
	}
	id.AckSet = append([]int64(nil), t.bits...)
	id.BatchSize = proto.Int32(int32(t.size))
	return []*pb.MessageIdData{id}
}

func (p *partitionConsumer) ack(m *Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return ErrConsumerClosed
	}
	p.unnackLocked(m)
	if len(m.chunkID) == 0 && (m.ID.BatchSize <= 1 || m.ID.BatchIndex < 0) {
		// A message of its own entry (the common case): no slice to carry its id.
		key := entryKey{uint64(m.ID.LedgerID), uint64(m.ID.EntryID)}
		p.acks[key] = newIDData(key.ledger, key.entry)
	} else if len(m.chunkID) == 0 && p.ackInBatchLocked(m) {
		// Grouped with its entry's id.
	} else {
		for _, id := range p.ackIDsLocked(m) {
			key := entryKey{id.GetLedgerId(), id.GetEntryId()}
			p.acks[key] = id // a later, fuller ack_set of the same entry replaces the earlier one
		}
	}
	if len(p.acks) >= p.opts.AckGroupMax {
		p.flushAcksLocked()
	}
	return nil
}

// ackInBatchLocked groups the acknowledgement of m, a message of a batch whose entry
// has a tracker: the entry's id once the whole batch is acknowledged, until then (with
// BatchIndexAck) the group's one id of the entry, whose ack set is brought up to date
// in place. Each message of a batch made an id, its ack set, its batch size and a slice
// to carry them, and replaced the one the message before made: four allocations per
// message of every batch a stream acknowledged, where one id per entry and group does.
// It reports false, doing nothing, when the entry has no tracker (see ackIDsLocked).
func (p *partitionConsumer) ackInBatchLocked(m *Message) bool {
	key := entryKey{uint64(m.ID.LedgerID), uint64(m.ID.EntryID)}
	t := p.trackers[key]
	if t == nil {
		return false
	}
	t.clear(int(m.ID.BatchIndex))
	if t.done() {
		delete(p.trackers, key)
		p.acks[key] = newIDData(key.ledger, key.entry)
		return true
	}
	if !p.opts.BatchIndexAck {
		return true // the broker learns of the batch once all of it is acknowledged
	}
	if id := p.acks[key]; id != nil && len(id.AckSet) == len(t.bits) && id.GetBatchSize() == int32(t.size) {
		// The tracker holds every index acknowledged so far: its bits are the fuller set.
		copy(id.AckSet, t.bits)
		return true
	}
	id := newIDData(key.ledger, key.entry)
	id.AckSet = append([]int64(nil), t.bits...)
	id.BatchSize = proto.Int32(int32(t.size))
	p.acks[key] = id
	return true
}

func (p *partitionConsumer) flushAcksLocked() {
	if len(p.acks) == 0 || p.cn == nil {
		return
	}
	ids := make([]*pb.MessageIdData, 0, len(p.acks))
	for k, id := range p.acks {
		ids = append(ids, id)
		delete(p.acks, k)
	}
	_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(p.id), AckType: pb.CommandAck_Individual.Enum(), MessageId: ids}})
}

func (p *partitionConsumer) ackSync(ctx context.Context, m *Message) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrConsumerClosed
	}
	p.unnackLocked(m)
	ids := p.ackIDsLocked(m)
	for _, id := range ids {
		delete(p.acks, entryKey{id.GetLedgerId(), id.GetEntryId()})
	}
	cn := p.cn
	p.mu.Unlock()
	if len(ids) == 0 {
		// Without batch-index acks the broker only learns of a batch when all of it is
		// acknowledged, so this acknowledgement is not durable yet: say so.
		return fmt.Errorf("%w: message %s on %s", ErrAckDeferred, m.ID, p.topic)
	}
	return p.sendAck(ctx, cn, pb.CommandAck_Individual, ids)
}

func (p *partitionConsumer) sendAck(ctx context.Context, cn *conn.Conn, typ pb.CommandAck_AckType, ids []*pb.MessageIdData) error {
	if cn == nil {
		return fmt.Errorf("%w: not connected to the broker for %s; retry", ErrConnectionClosed, p.topic)
	}
	reqID := p.client.nextRequestID()
	resp, err := cn.Request(ctx, reqID, &pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(p.id), AckType: typ.Enum(), MessageId: ids, RequestId: proto.Uint64(reqID)}})
	if err != nil {
		return fmt.Errorf("pulsar: acknowledging on %s: %w", p.topic, err)
	}
	if ar := resp.GetAckResponse(); ar != nil && ar.Error != nil {
		return fmt.Errorf("pulsar: acknowledging on %s: %w", p.topic, &ServerError{Code: ServerErrorCode(ar.GetError()), Message: ar.GetMessage()})
	}
	return nil
}

func (p *partitionConsumer) ackCumulative(ctx context.Context, m *Message) error {
	p.mu.Lock()
	p.forgetCoveredLocked(m)
	p.mu.Unlock()
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(m.ID.LedgerID)), EntryId: proto.Uint64(uint64(m.ID.EntryID))}
	if last := len(m.chunkID); last > 0 {
		c := m.chunkID[last-1]
		id = &pb.MessageIdData{LedgerId: proto.Uint64(uint64(c.LedgerID)), EntryId: proto.Uint64(uint64(c.EntryID))}
	} else if m.ID.BatchSize > 1 && int(m.ID.BatchIndex) < int(m.ID.BatchSize)-1 {
		if p.opts.BatchIndexAck {
			t := newBatchTracker(int(m.ID.BatchSize), nil)
			for i := 0; i <= int(m.ID.BatchIndex); i++ {
				t.clear(i)
			}
			id.AckSet, id.BatchSize = t.bits, proto.Int32(int32(t.size))
		} else if m.ID.EntryID > 0 {
			id.EntryId = proto.Uint64(uint64(m.ID.EntryID - 1)) // up to the previous entry; this batch is not complete
		} else {
			return nil
		}
	}
	p.mu.Lock()
	cn := p.cn
	p.mu.Unlock()
	return p.sendAck(ctx, cn, pb.CommandAck_Cumulative, []*pb.MessageIdData{id})
}

// forgetCoveredLocked forgets the batch trackers (with their hand-back records) and
// the pending nacks that a cumulative acknowledgement of m settles: those of every entry
// before m's (ledger, then entry, as the broker orders them), and of m's own entry the
// indexes up to m's (all of it when m ends its batch or is no batch). An entry's tracker
// goes once none of its indexes is outstanding.
func (p *partitionConsumer) forgetCoveredLocked(m *Message) {
	last := m.ID
	if n := len(m.chunkID); n > 0 {
		last = m.chunkID[n-1]
	}
	through := entryKey{uint64(last.LedgerID), uint64(last.EntryID)}
	whole := len(m.chunkID) > 0 || m.ID.BatchSize <= 1 || m.ID.BatchIndex < 0 || m.ID.BatchIndex >= m.ID.BatchSize-1
	before := func(k entryKey) bool {
		return k.ledger < through.ledger || k.ledger == through.ledger && k.entry < through.entry
	}
	for k, t := range p.trackers {
		if before(k) || k == through && whole {
			delete(p.trackers, k)
		} else if k == through {
			for i := 0; i <= int(m.ID.BatchIndex); i++ {
				t.clear(i)
				if t.back != nil && i < t.size {
					t.back[i/64] &^= 1 << (i % 64)
				}
			}
			if t.done() {
				delete(p.trackers, k)
			}
		}
	}
	for k, n := range p.nacks {
		if before(k) || k == through && whole {
			delete(p.nacks, k)
		} else if k == through {
			kept := n.indexes[:0]
			for _, x := range n.indexes {
				if x > m.ID.BatchIndex {
					kept = append(kept, x)
				}
			}
			n.indexes = kept
			if len(kept) == 0 {
				delete(p.nacks, k)
			}
		}
	}
}

func (p *partitionConsumer) nack(m *Message, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	due := time.Now().Add(delay)
	ids := []MessageID{m.ID}
	if len(m.chunkID) > 0 {
		ids = m.chunkID
	}
	for _, id := range ids {
		key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
		n := p.nacks[key]
		if n == nil {
			n = &pendingNack{due: due}
			p.nacks[key] = n
		}
		n.due = later(n.due, due)
		i := batchIndex(id)
		if !containsIndex(n.indexes, i) {
			n.indexes = append(n.indexes, i)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func containsIndex(s []int32, i int32) bool {
	for _, x := range s {
		if x == i {
			return true
		}
	}
	return false
}

// unnackLocked forgets a nack of m, acknowledged now: a nack of one of its batch-mates
// still stands (and its entry still goes back for it).
func (p *partitionConsumer) unnackLocked(m *Message) {
	ids := []MessageID{m.ID}
	if len(m.chunkID) > 0 {
		ids = m.chunkID
	}
	for _, id := range ids {
		key := entryKey{uint64(id.LedgerID), uint64(id.EntryID)}
		n := p.nacks[key]
		if n == nil {
			continue
		}
		i := batchIndex(id)
		kept := n.indexes[:0]
		for _, x := range n.indexes {
			if x != i {
				kept = append(kept, x)
			}
		}
		n.indexes = kept
		if len(kept) == 0 {
			delete(p.nacks, key)
		}
	}
}

// redeliverDueLocked asks the broker to redeliver the negatively acknowledged entries
// whose delay has passed. The acknowledgements grouped so far go first, so the ack_set
// the broker redelivers a batch with leaves out what the application acknowledged.
func (p *partitionConsumer) redeliverDueLocked(now time.Time) {
	if len(p.nacks) == 0 || p.cn == nil {
		return
	}
	var ids []*pb.MessageIdData
	for k, n := range p.nacks {
		if now.Before(n.due) {
			continue
		}
		delete(p.nacks, k)
		if t := p.trackers[k]; t != nil && (p.opts.Type == Shared || p.opts.Type == KeyShared) {
			// The entry may come back here, or go to another consumer: the tracker
			// stays, to deliver only what was handed back, until handBackExpiry.
			t.handBack(n.indexes, now)
		}
		ids = append(ids, &pb.MessageIdData{LedgerId: proto.Uint64(k.ledger), EntryId: proto.Uint64(k.entry)})
	}
	if len(ids) == 0 {
		return
	}
	p.flushAcksLocked()
	if p.opts.Type == Shared || p.opts.Type == KeyShared {
		_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
			RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(p.id), MessageIds: ids}})
		return
	}
	// Exclusive and Failover subscriptions redeliver everything not acknowledged.
	p.mu.Unlock()
	p.redeliverAll()
	p.mu.Lock()
}

// expireHandedBackLocked forgets the trackers of entries handed back that did not come
// again within handBackExpiry, and the hand-back records of those that came fewer times
// than handed back (the broker found the entry not yet dispatched again and sent it once).
func (p *partitionConsumer) expireHandedBackLocked(now time.Time) {
	if now.Sub(p.expiredAt) < time.Second {
		return // a look once a second is enough for an expiry in minutes
	}
	p.expiredAt = now
	for k, t := range p.trackers {
		if !t.handedBack.IsZero() && now.Sub(t.handedBack) >= handBackExpiry {
			if t.came {
				t.forgetHandBack()
			} else {
				delete(p.trackers, k)
			}
		}
	}
}

func (p *partitionConsumer) redeliverAll() {
	freed, bytes := p.c.removeFrom(p)
	p.mu.Lock()
	defer p.mu.Unlock()
	parkedPermits, parkedBytes := p.unparkLocked()
	freed += parkedPermits
	p.heldBytes = max(0, p.heldBytes-bytes-parkedBytes)
	if p.cn == nil {
		return
	}
	p.flushAcksLocked() // what was acknowledged is not redelivered
	if p.opts.Type == Shared || p.opts.Type == KeyShared {
		// Every entry goes back, perhaps to other consumers: all that is outstanding
		// of each batch is delivered again if it comes here (see batchTracker).
		now := time.Now()
		for _, t := range p.trackers {
			var all []int32
			for i := range t.size {
				if t.outstanding(i) {
					all = append(all, int32(i))
				}
			}
			t.handBack(all, now)
		}
	}
	_ = p.cn.Send(&pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
		RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(p.id)}})
	p.returnPermitsLocked(freed)
}
