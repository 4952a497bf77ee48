package pulsartest

import (
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SeekRecord is one SEEK the broker received: to a message id, or to the first message
// published at PublishTime (Unix milliseconds) or later.
type SeekRecord struct {
	Topic       string
	ID          *MessageIDData // nil for a seek by time
	PublishTime uint64
}

// Seeks returns the SEEK requests received for topic, in order.
func (b *Broker) Seeks(topic string) []SeekRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []SeekRecord
	for _, s := range b.seeks {
		if s.Topic == topic {
			out = append(out, s)
		}
	}
	return out
}

// seek answers a SEEK as the broker does: every consumer of the topic is closed
// (CLOSE_CONSUMER) and what was queued for it forgotten (the cursor moved), then the
// request succeeds. The fake broker keeps no cursor: tests Deliver what the new position
// brings, as a broker would send it to the consumers that subscribe again.
func (c *serverConn) seek(s *pb.CommandSeek) {
	b := c.b
	b.mu.Lock()
	topic := ""
	for _, sub := range b.subs {
		if sub.c == c && sub.id == s.GetConsumerId() {
			topic = sub.topic
		}
	}
	rec := SeekRecord{Topic: topic, ID: s.GetMessageId()}
	if s.MessagePublishTime != nil {
		rec.PublishTime = s.GetMessagePublishTime()
	}
	b.seeks = append(b.seeks, rec)
	var closed []*subscriber
	kept := b.subs[:0]
	for _, sub := range b.subs {
		if sub.topic == topic {
			closed = append(closed, sub)
			continue
		}
		kept = append(kept, sub)
	}
	b.subs = kept
	delete(b.outgoing, topic)
	b.mu.Unlock()
	for _, sub := range closed {
		sub.c.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(sub.id), RequestId: proto.Uint64(0)}})
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(s.GetRequestId())}})
}
