package pulsartest

import (
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Outgoing is a message the fake broker dispatches to a topic's consumer, exactly as
// given: tests build chunks, batches and ack sets by hand.
type Outgoing struct {
	Metadata        *MessageMetadata
	Payload         []byte
	LedgerID        uint64 // 0: one is assigned
	EntryID         uint64
	RedeliveryCount uint32
	AckSet          []int64
	Corrupt         bool // send a wrong CRC32C
	// RawMetadata, when set, is sent instead of Metadata's encoding: hostile bytes
	// that need not parse as MessageMetadata.
	RawMetadata []byte
}

// AckRecord is one ACK the broker received.
type AckRecord struct {
	Topic           string
	Type            AckType
	IDs             []*MessageIDData
	ValidationError *ValidationError
}

// RedeliverRecord is one REDELIVER_UNACKNOWLEDGED_MESSAGES the broker received: the
// entries named (none: everything not acknowledged). The fake broker redelivers nothing
// by itself; tests Deliver the entries again as a broker would.
type RedeliverRecord struct {
	Topic string
	IDs   []*MessageIDData
}

type subscriber struct {
	c       *serverConn
	id      uint64
	topic   string
	permits int
	granted int
	queue   []Outgoing
	sent    int
}

// Deliver queues messages for the consumer subscribed to topic; they are sent as its
// flow permits allow (a batch costs one permit per message in it).
func (b *Broker) Deliver(topic string, msgs ...Outgoing) {
	b.mu.Lock()
	b.outgoing[topic] = append(b.outgoing[topic], msgs...)
	b.mu.Unlock()
	b.dispatch()
}

// Acks returns the ACK frames received for topic, in order.
func (b *Broker) Acks(topic string) []AckRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []AckRecord
	for _, a := range b.acks {
		if a.Topic == topic {
			out = append(out, a)
		}
	}
	return out
}

// Permits returns the flow permits granted in total and still available for topic's consumer.
func (b *Broker) Permits(topic string) (granted, available int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.subs {
		if s.topic == topic {
			granted += s.granted
			available += s.permits
		}
	}
	return granted, available
}

// CloseConsumers sends CLOSE_CONSUMER to every consumer (a topic unload).
func (b *Broker) CloseConsumers() {
	b.mu.Lock()
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, s := range subs {
		s.c.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(s.id), RequestId: proto.Uint64(0)}})
	}
}

func (c *serverConn) subscribe(s *pb.CommandSubscribe) {
	b := c.b
	b.mu.Lock()
	if b.missingLocked(s) {
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(s.GetRequestId()),
			Error: pb.ServerError_TopicNotFound.Enum(), Message: proto.String("pulsartest: topic not found: " + s.GetTopic())}})
		return
	}
	b.subs = append(b.subs, &subscriber{c: c, id: s.GetConsumerId(), topic: s.GetTopic()})
	b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(s.GetRequestId())}})
}

func (c *serverConn) flow(f *pb.CommandFlow) {
	b := c.b
	if f.GetMessagePermits() > math.MaxInt32 {
		// A real broker reads the permits as a Java int and closes the connection.
		c.kill()
		return
	}
	b.mu.Lock()
	for _, s := range b.subs {
		if s.c == c && s.id == f.GetConsumerId() {
			s.permits += int(f.GetMessagePermits())
			s.granted += int(f.GetMessagePermits())
		}
	}
	b.mu.Unlock()
	b.dispatch()
}

func (c *serverConn) ack(a *pb.CommandAck) {
	b := c.b
	b.mu.Lock()
	topic := ""
	for _, s := range b.subs {
		if s.c == c && s.id == a.GetConsumerId() {
			topic = s.topic
		}
	}
	b.acks = append(b.acks, AckRecord{Topic: topic, Type: a.GetAckType(), IDs: a.GetMessageId(), ValidationError: a.ValidationError})
	b.mu.Unlock()
	if a.RequestId != nil {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: &pb.CommandAckResponse{
			ConsumerId: a.ConsumerId, RequestId: a.RequestId}})
	}
}

// Redelivers returns the redelivery requests received for topic, in order.
func (b *Broker) Redelivers(topic string) []RedeliverRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []RedeliverRecord
	for _, r := range b.redelivers {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

func (c *serverConn) redeliver(r *pb.CommandRedeliverUnacknowledgedMessages) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	topic := ""
	for _, s := range b.subs {
		if s.c == c && s.id == r.GetConsumerId() {
			topic = s.topic
		}
	}
	b.redelivers = append(b.redelivers, RedeliverRecord{Topic: topic, IDs: r.GetMessageIds()})
}

func (c *serverConn) closeConsumer(r *pb.CommandCloseConsumer) {
	b := c.b
	b.mu.Lock()
	kept := b.subs[:0]
	for _, s := range b.subs {
		if !(s.c == c && s.id == r.GetConsumerId()) {
			kept = append(kept, s)
		}
	}
	b.subs = kept
	b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(r.GetRequestId())}})
}

// dispatch sends queued messages to subscribers with permits. It runs on the caller of
// Deliver and on each connection's reader (a FLOW): the picking and the writing are one
// step under dispatchMu, or a FLOW answered between another dispatch's two writes would
// send a later message before an earlier one (a real broker delivers in order).
func (b *Broker) dispatch() {
	b.dispatchMu.Lock()
	defer b.dispatchMu.Unlock()
	type send struct {
		c   *serverConn
		buf []byte
	}
	var sends []send
	b.mu.Lock()
	for _, s := range b.subs {
		q := b.outgoing[s.topic]
		for len(q) > 0 && s.permits > 0 {
			m := q[0]
			q = q[1:]
			// A batch costs one permit per message it claims, as on a real broker: a
			// hostile count (negative, huge) is charged as it stands.
			cost := 1
			if m.Metadata != nil && m.Metadata.NumMessagesInBatch != nil {
				cost = int(m.Metadata.GetNumMessagesInBatch())
			}
			s.permits -= cost
			ledger, entry := m.LedgerID, m.EntryID
			if ledger == 0 {
				b.entry++
				ledger, entry = 7, b.entry
			}
			md := m.RawMetadata
			if md == nil {
				md, _ = proto.Marshal(m.Metadata)
			}
			buf, err := frame.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{
				ConsumerId: proto.Uint64(s.id), RedeliveryCount: proto.Uint32(m.RedeliveryCount), AckSet: m.AckSet,
				MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}}}, md, m.Payload, 0)
			if err != nil {
				panic(err)
			}
			if m.Corrupt {
				buf[len(buf)-1] ^= 0xff
			}
			sends = append(sends, send{s.c, buf})
			s.sent++
		}
		b.outgoing[s.topic] = q
	}
	b.mu.Unlock()
	for _, s := range sends {
		s.c.writeRaw(s.buf)
	}
}
