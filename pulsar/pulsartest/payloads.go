package pulsartest

import (
	"encoding/binary"
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

// BatchMessage is one message of a batch DeliverBatch builds.
type BatchMessage struct {
	Payload    []byte
	Key        string
	Properties map[string]string
}

// DeliverBatch queues one batch of msgs at entry ledger:entry (0:0: one is assigned) for
// the consumer of topic: Deliver of a batch for tests outside the pulsar module's tree.
func (b *Broker) DeliverBatch(topic string, ledger, entry uint64, msgs ...BatchMessage) {
	var buf []byte
	for i, m := range msgs {
		smd := &pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(m.Payload))), SequenceId: proto.Uint64(uint64(i))}
		if m.Key != "" {
			smd.PartitionKey = proto.String(m.Key)
		}
		for k, v := range m.Properties {
			smd.Properties = append(smd.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
		}
		enc, _ := proto.Marshal(smd)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(enc)))
		buf = append(buf, enc...)
		buf = append(buf, m.Payload...)
	}
	b.Deliver(topic, Outgoing{LedgerID: ledger, EntryID: entry, Payload: buf, Metadata: &pb.MessageMetadata{
		ProducerName: proto.String("pulsartest"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())),
		NumMessagesInBatch: proto.Int32(int32(len(msgs))), UncompressedSize: proto.Uint32(uint32(len(buf)))}})
}
