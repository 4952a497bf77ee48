package pulsar

import (
	"context"
	"fmt"
	"sync"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// AckSyncAll acknowledges ms at once and waits for the broker's confirmations (the
// protocol's ack receipts, the Java client's isAckReceiptEnabled): one ACK with a
// request id per partition, holding every message of it, sent to the partitions
// together. errs[i] is ms[i]'s outcome: nil once the broker answered ACK_RESPONSE
// without an error, which it does after applying the acknowledgement to the
// subscription. A message of a batch is acknowledged by its batch index (and its
// batch-mates acknowledged before it); ErrAckDeferred without BatchIndexAck, until the
// rest of its batch is acknowledged.
func (c *Consumer) AckSyncAll(ctx context.Context, ms []*Message) (errs []error) {
	errs = make([]error, len(ms))
	var order []*partitionConsumer
	groups := map[*partitionConsumer][]int{}
	for i, m := range ms {
		if groups[m.pc] == nil {
			order = append(order, m.pc)
		}
		groups[m.pc] = append(groups[m.pc], i)
	}
	if len(order) == 1 {
		order[0].ackSyncAll(ctx, ms, groups[order[0]], errs)
		return errs
	}
	var wg sync.WaitGroup
	for _, pc := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pc.ackSyncAll(ctx, ms, groups[pc], errs) // each goroutine writes its own indexes
		}()
	}
	wg.Wait()
	return errs
}

// ackSyncAll acknowledges ms[idx] (all this partition's) with one ACK carrying a request
// id, and sets errs[idx] to the outcome.
func (p *partitionConsumer) ackSyncAll(ctx context.Context, ms []*Message, idx []int, errs []error) {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		for _, i := range idx {
			errs[i] = ErrConsumerClosed
		}
		return
	}
	// One id per entry: a later, fuller ack set of the same batch replaces the earlier
	// (the tracker holds every index acknowledged so far, grouped or not).
	var keys []entryKey
	byKey := map[entryKey]*pb.MessageIdData{}
	var sent []int
	for _, i := range idx {
		m := ms[i]
		p.unnackLocked(m)
		ids := p.ackIDsLocked(m)
		if len(ids) == 0 {
			errs[i] = fmt.Errorf("%w: message %s on %s", ErrAckDeferred, m.ID, p.topic)
			continue
		}
		for _, id := range ids {
			k := entryKey{id.GetLedgerId(), id.GetEntryId()}
			delete(p.acks, k) // sent now, and waited for: not in the next group too
			if byKey[k] == nil {
				keys = append(keys, k)
			}
			byKey[k] = id
		}
		sent = append(sent, i)
	}
	cn := p.cn
	p.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	ids := make([]*pb.MessageIdData, len(keys))
	for j, k := range keys {
		ids[j] = byKey[k]
	}
	err := p.sendAck(ctx, cn, pb.CommandAck_Individual, ids)
	for _, i := range sent {
		errs[i] = err
	}
}
