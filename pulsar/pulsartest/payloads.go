package pulsartest

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// DeliverPayloads queues one plain message per payload (not batched, no key) for the
// consumer of topic: Deliver for tests outside the pulsar module's tree, which cannot
// build message metadata themselves.
func (b *Broker) DeliverPayloads(topic string, payloads ...[]byte) {
	msgs := make([]Outgoing, len(payloads))
	for i, p := range payloads {
		msgs[i] = Outgoing{Payload: p, Metadata: &pb.MessageMetadata{ProducerName: proto.String("pulsartest"),
			SequenceId: proto.Uint64(uint64(i)), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}}
	}
	b.Deliver(topic, msgs...)
}
