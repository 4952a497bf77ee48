// Producer registration: PRODUCER with its access modes and name checks,
// CLOSE_PRODUCER, and the broker-side closes and migrations of producers.

package pulsartest

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// UniqueProducerNames makes a producer name busy on its topic while a producer of that
// name is registered (ProducerBusy to another), as on the broker.
func (b *Broker) UniqueProducerNames(on bool) { b.mu.Lock(); b.uniqueNames = on; b.mu.Unlock() }

// LoseProducerSuccess registers the next n producers but never answers them, as a
// broker whose answer comes after the client gave up.
func (b *Broker) LoseProducerSuccess(n int) { b.mu.Lock(); b.lostProducerOK = n; b.mu.Unlock() }

// MigrateProducers sends TOPIC_MIGRATED for every registered producer, pointing at url.
func (b *Broker) MigrateProducers(url string) {
	b.mu.Lock()
	var todo []func()
	for c := range b.conns {
		for id := range c.producers {
			c, id := c, id
			todo = append(todo, func() {
				c.write(&pb.BaseCommand{Type: pb.BaseCommand_TOPIC_MIGRATED.Enum(), TopicMigrated: &pb.CommandTopicMigrated{
					ResourceId: proto.Uint64(id), ResourceType: pb.CommandTopicMigrated_Producer.Enum(), BrokerServiceUrl: proto.String(url)}})
			})
		}
		c.producers = map[uint64]string{}
	}
	b.mu.Unlock()
	for _, f := range todo {
		f()
	}
}

// CloseProducers sends CLOSE_PRODUCER for every registered producer (a topic unload).
func (b *Broker) CloseProducers() {
	b.mu.Lock()
	var todo []func()
	for c := range b.conns {
		for id := range c.producers {
			c := c
			id := id
			todo = append(todo, func() {
				c.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(0)}})
			})
		}
		c.producers = map[uint64]string{}
	}
	b.mu.Unlock()
	for _, f := range todo {
		f()
	}
}

// FencedProducers is how many producers ExclusiveWithFencing takeovers closed.
func (b *Broker) FencedProducers() int { b.mu.Lock(); defer b.mu.Unlock(); return b.fenced }

// producer registers a producer, applying its access mode, name and schema checks.
func (c *serverConn) producer(r *pb.CommandProducer) {
	b := c.b
	b.mu.Lock()
	name := r.GetProducerName()
	if name == "" {
		b.producerSeq++
		name = fmt.Sprintf("pulsartest-%d", b.producerSeq)
	}
	topicEpoch, code, msg, fence := b.accessLocked(c, r, name)
	if code == nil && b.uniqueNames && b.nameBusyLocked(r.GetTopic(), name) {
		code, msg = pb.ServerError_ProducerBusy.Enum(), "Producer with name '"+name+"' is already connected to topic"
	}
	if code != nil {
		b.mu.Unlock()
		fence()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(r.GetRequestId()),
			Error: code, Message: proto.String(msg)}})
		return
	}
	version, refusal := b.checkSchemaLocked(r.GetTopic(), r.GetSchema())
	if refusal != "" {
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(r.GetRequestId()),
			Error: pb.ServerError_IncompatibleSchema.Enum(), Message: proto.String(refusal)}})
		return
	}
	c.producers[r.GetProducerId()] = r.GetTopic()
	c.names[r.GetProducerId()] = name
	last := int64(-1)
	if h, ok := b.highest[dedupKey(r.GetTopic(), name)]; ok && b.dedup {
		last = int64(h)
	}
	if b.lostProducerOK > 0 {
		b.lostProducerOK--
		b.mu.Unlock()
		fence()
		return
	}
	b.mu.Unlock()
	fence()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId: proto.Uint64(r.GetRequestId()), ProducerName: proto.String(name), LastSequenceId: proto.Int64(last), SchemaVersion: version, TopicEpoch: topicEpoch}})
}

// closeProducer unregisters a producer.
func (c *serverConn) closeProducer(r *pb.CommandCloseProducer) {
	b := c.b
	b.mu.Lock()
	delete(c.producers, r.GetProducerId())
	delete(c.names, r.GetProducerId())
	b.mu.Unlock()
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(r.GetRequestId())}})
}

// holder is a topic's exclusive producer.
type holder struct {
	c  *serverConn
	id uint64
}

// exclusiveLocked is topic's exclusive producer, if it is still registered.
func (b *Broker) exclusiveLocked(topic string) (holder, bool) {
	h, ok := b.exclusive[topic]
	if !ok {
		return h, false
	}
	if _, open := b.conns[h.c]; !open || h.c.producers[h.id] != topic {
		delete(b.exclusive, topic)
		return h, false
	}
	return h, true
}

// accessLocked applies r's access mode as the broker does: a shared producer is refused
// (ProducerBusy) while the topic has an exclusive one; an Exclusive one (ProducerFenced)
// while the topic has any producer; an ExclusiveWithFencing one closes every producer of
// the topic (fence, to run once b.mu is released) and is fenced itself when the topic
// epoch it brings is older than the topic's. An exclusive producer accepted becomes the
// topic's holder, with the epoch it brings or the next one, which it is answered.
func (b *Broker) accessLocked(c *serverConn, r *pb.CommandProducer, name string) (epoch *uint64, code *pb.ServerError, msg string, fence func()) {
	topic := r.GetTopic()
	fence = func() {}
	_, held := b.exclusiveLocked(topic)
	mode := r.GetProducerAccessMode()
	switch mode {
	case pb.ProducerAccessMode_Shared:
		if held {
			return nil, pb.ServerError_ProducerBusy.Enum(), "Topic has an existing exclusive producer", fence
		}
		return nil, nil, "", fence
	case pb.ProducerAccessMode_Exclusive:
		if held || b.producersOnLocked(topic) > 0 {
			return nil, pb.ServerError_ProducerFenced.Enum(), "Topic has an existing producer", fence
		}
	case pb.ProducerAccessMode_ExclusiveWithFencing:
		var closes []func()
		for oc := range b.conns {
			for id, t := range oc.producers {
				if t != topic {
					continue
				}
				delete(oc.producers, id)
				delete(oc.names, id)
				b.fenced++
				closes = append(closes, func() {
					oc.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(0)}})
				})
			}
		}
		delete(b.exclusive, topic)
		fence = func() {
			for _, f := range closes {
				f()
			}
		}
	default:
		return nil, pb.ServerError_NotAllowedError.Enum(), "pulsartest: access mode " + mode.String() + " is not supported", fence
	}
	cur, known := b.topicEpochs[topic]
	if r.TopicEpoch != nil && known && r.GetTopicEpoch() < cur {
		return nil, pb.ServerError_ProducerFenced.Enum(), fmt.Sprintf("Topic epoch has already moved. Current epoch: %d, Producer epoch: %d", cur, r.GetTopicEpoch()), fence
	}
	next := cur + 1
	if r.TopicEpoch != nil {
		next = r.GetTopicEpoch()
	}
	b.topicEpochs[topic] = next
	b.exclusive[topic] = holder{c: c, id: r.GetProducerId()}
	return proto.Uint64(next), nil, "", fence
}

// producersOnLocked counts the producers registered on topic.
func (b *Broker) producersOnLocked(topic string) int {
	n := 0
	for c := range b.conns {
		for _, t := range c.producers {
			if t == topic {
				n++
			}
		}
	}
	return n
}

// nameBusyLocked reports whether a producer named name is registered on topic on a
// connection that is still open.
func (b *Broker) nameBusyLocked(topic, name string) bool {
	for c := range b.conns {
		for id, t := range c.producers {
			if t == topic && c.names[id] == name {
				return true
			}
		}
	}
	return false
}
