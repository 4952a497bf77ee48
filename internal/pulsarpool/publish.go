package pulsarpool

import (
	"context"
	"errors"
	"io"
	"strconv"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
)

// PublishAsync implements ingress.Publisher.
func (ps *Pool) PublishAsync(ctx context.Context, m *ingress.Message, done func(string, error)) {
	ps.publishAsync(ctx, m, done, false)
}

// charge takes n bytes of the budget for a message the producer will hold: waiting for
// room (Acquire), or at once whether they fit or not (over: a dead letter, the copy of
// a message its subscription holds charged until the acknowledgement that follows the
// publication, so the overshoot is bounded by the deliveries being dead-lettered, and
// waiting could wait on a budget only that subscription can free).
func (ps *Pool) charge(ctx context.Context, n int64, over bool) error {
	if over {
		ps.o.Budget.Charge(n)
		return nil
	}
	return ps.o.Budget.Acquire(ctx, n)
}

func (ps *Pool) publishAsync(ctx context.Context, m *ingress.Message, done func(string, error), over bool) {
	size := int64(len(m.Payload)) + m.MetadataBytes() // what the producer holds of it until the receipt
	if err := ps.charge(ctx, size, over); err != nil {
		done("", ps.stopNamed(m, budgetErr(err)))
		return
	}
	e, err := ps.acquire(ctx, m.Topic, m.Producer, m.Schema)
	if err != nil {
		ps.o.Budget.Release(size)
		done("", ps.stopNamed(m, err))
		return
	}
	pm := messagePool.Get().(*pulsar.ProducerMessage)
	// SendAsync keeps nothing of the message, chunked or not: ingress may reuse its read
	// buffer and properties as soon as it returns.
	*pm = pulsar.ProducerMessage{Payload: m.Payload, Key: m.Key, Properties: m.Properties,
		Extra: pulsar.Property{Key: m.ExtraKey, Value: m.ExtraValue}}
	var seq *int64
	if m.Producer != "" {
		seq = &m.Sequence
		pm.SequenceID = seq
		pm.RoutingKey = namedRoutingKey(m)
	}
	pb := newPublication()
	pb.ps, pb.e, pb.size, pb.producer, pb.topic, pb.done = ps, e, size, m.Producer, m.Topic, done // m is not kept
	e.p.SendAsync(ctx, pm, pb.settle)
	*pm = pulsar.ProducerMessage{}
	messagePool.Put(pm) // SendAsync does not keep it
}

// budgetErr is the error of a record that could not be charged to the budget.
func budgetErr(err error) error {
	if errors.Is(err, budget.ErrClosed) {
		return errShuttingDown
	}
	return err
}

// partitionedName is the Pulsar producer name of a named stream on a topic of n
// partitions: the stream's name and the count. The broker deduplicates per partition and
// producer name; under one count a record goes to the same partition on every resend
// (its key's, or its stream's: see namedRoutingKey), so a sequence id at or below the
// name's last one there is a record already stored there. When partitions are added, a
// record in flight may be resent to another partition, where the stream's later records
// of other keys may already be: under the same name the broker would drop it as a
// duplicate, and it would be lost. Under the new count's name every partition starts the
// stream afresh: such a record is stored again (a duplicate, never a loss). A named
// producer never adopts partitions added while it lives (its request goes on with the
// count it began with); the stream's next producer, at its next request or after a
// failure, takes the new count and name.
func partitionedName(name string, n int) string { return name + "@" + strconv.Itoa(n) }

// namedRoutingKey is what a named stream's record is routed by when it has no key: the
// stream's producer name (a function of the route and the stream name only) instead of
// round-robin, so every resend of it lands on the partition its first copy went to,
// whatever became of the producer that sent that (a restart, an eviction, another
// bridge), and the broker's deduplication, which is per partition, sees it; the stream's
// keyless records keep their order in that one partition. A keyed record goes by its
// key, as always. Both hold while the topic's partition count does not change.
func namedRoutingKey(m *ingress.Message) string { return m.Producer }

// PublishStream implements ingress.Publisher. The budget is charged with what the
// producer may hold of the message at once (its pending bytes), not the whole size.
func (ps *Pool) PublishStream(ctx context.Context, m *ingress.Message, size int64, r io.Reader) (string, error) {
	return ps.publishStream(ctx, m, size, r, false)
}

func (ps *Pool) publishStream(ctx context.Context, m *ingress.Message, size int64, r io.Reader, over bool) (string, error) {
	charge := size
	if lim := int64(ps.opts.MaxPendingBytes); lim > 0 {
		charge = min(charge, lim)
	}
	charge += m.MetadataBytes()
	if err := ps.charge(ctx, charge, over); err != nil {
		return "", budgetErr(err)
	}
	defer ps.o.Budget.Release(charge)
	e, err := ps.acquire(ctx, m.Topic, m.Producer, m.Schema)
	if err != nil {
		return "", ps.stopNamed(m, err)
	}
	defer ps.release(e)
	pm := &pulsar.ProducerMessage{Key: m.Key, Properties: m.Properties, Extra: pulsar.Property{Key: m.ExtraKey, Value: m.ExtraValue}}
	if m.Producer != "" {
		seq := m.Sequence
		pm.SequenceID = &seq
		pm.RoutingKey = namedRoutingKey(m)
	}
	id, err := e.p.SendStream(ctx, pm, size, r)
	if err != nil {
		cerr := ps.stopNamed(m, Classify(err))
		if failed(err) || e.p.Err() != nil {
			ps.evict(e, err)
		}
		return "", cerr
	}
	if id.Duplicate() {
		return "", ingress.ErrDuplicate
	}
	return FormatID(id), nil
}

// FormatID writes ledger:entry:partition:batchIndex, as pulsar.MessageID.String does,
// without fmt.
func FormatID(id pulsar.MessageID) string {
	var b [64]byte
	return string(appendID(b[:0], id))
}

func appendID(b []byte, id pulsar.MessageID) []byte {
	b = strconv.AppendInt(b, id.LedgerID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, id.EntryID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(id.Partition), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(id.BatchIndex), 10)
}
