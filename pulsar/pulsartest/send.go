// SEND: persisting messages (with deduplication) and answering their receipts.

package pulsartest

import (
	"encoding/binary"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SetDeduplication emulates broker deduplication: a SEND whose sequence id is not above
// the producer's highest persisted one is answered with ledger and entry -1 and not stored.
func (b *Broker) SetDeduplication(on bool) { b.mu.Lock(); b.dedup = on; b.mu.Unlock() }

// Messages returns what was persisted on topic, in order.
func (b *Broker) Messages(topic string) []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Message
	for _, m := range b.messages {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// refusedSequenceID is the sequence id a SEND_ERROR names for s: a broker names a batch
// by its highest sequence id (Producer.publishMessage checks the entry with it, and a
// failed write answers max(highest, lowest)), not by the lowest one its receipt names.
func refusedSequenceID(s *pb.CommandSend) uint64 {
	return max(s.GetSequenceId(), s.GetHighestSequenceId())
}

func (c *serverConn) send(f *frame.Frame) {
	b := c.b
	s := f.Cmd.GetSend()
	md := &pb.MessageMetadata{}
	if err := proto.Unmarshal(f.Metadata, md); err != nil {
		return
	}
	b.mu.Lock()
	if len(b.sendErrors) > 0 {
		code := b.sendErrors[0]
		b.sendErrors = b.sendErrors[1:]
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: s.ProducerId, SequenceId: proto.Uint64(refusedSequenceID(s)), Error: code.Enum(), Message: proto.String("injected by pulsartest")}})
		return
	}
	topic, ok := c.producers[s.GetProducerId()]
	if !ok {
		b.mu.Unlock()
		return
	}
	highest := s.GetSequenceId()
	if s.GetHighestSequenceId() > highest {
		highest = s.GetHighestSequenceId()
	}
	var ledger, entry uint64
	if h, seen := b.highest[dedupKey(topic, md.GetProducerName())]; b.dedup && seen && highest <= h && !(s.GetIsChunk() && md.GetChunkId() > 0 && highest == h) {
		ledger, entry = ^uint64(0), ^uint64(0)
	} else {
		b.entry++
		ledger, entry = 1, b.entry
		if !s.GetIsChunk() || md.GetChunkId() == md.GetNumChunksFromMsg()-1 {
			b.highest[dedupKey(topic, md.GetProducerName())] = highest
		}
		b.messages = append(b.messages, decodeMessages(topic, md, f.Payload, ledger, entry)...)
	}
	receipt := &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: s.ProducerId, SequenceId: s.SequenceId, HighestSequenceId: s.HighestSequenceId,
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}}}
	switch {
	case b.skipReceipts > 0:
		b.skipReceipts--
	case b.holdReceipts:
		b.held = append(b.held, func() { c.write(receipt) })
	case b.receiptDelay > 0:
		b.wg.Add(1)
		time.AfterFunc(b.receiptDelay, func() {
			defer b.wg.Done()
			c.write(receipt)
		})
	default:
		b.mu.Unlock()
		c.write(receipt)
		return
	}
	b.mu.Unlock()
}

// dedupKey keys deduplication state, per topic (partition) and producer name, as the broker does.
func dedupKey(topic, producer string) string { return topic + "\x00" + producer }

func decodeMessages(topic string, md *pb.MessageMetadata, payload []byte, ledger, entry uint64) []Message {
	chunk := -1
	if md.NumChunksFromMsg != nil {
		chunk = int(md.GetChunkId())
	}
	if md.NumMessagesInBatch == nil {
		return []Message{{Topic: topic, Producer: md.GetProducerName(), SequenceID: md.GetSequenceId(), Payload: payload,
			Key: md.GetPartitionKey(), Properties: props(md.GetProperties()), LedgerID: ledger, EntryID: entry, BatchIndex: -1, Chunk: chunk,
			SchemaVersion: md.GetSchemaVersion()}}
	}
	var out []Message
	for i := 0; len(payload) >= 4; i++ {
		n := binary.BigEndian.Uint32(payload)
		if int(n) > len(payload)-4 {
			break
		}
		smd := &pb.SingleMessageMetadata{}
		if proto.Unmarshal(payload[4:4+n], smd) != nil {
			break
		}
		rest := payload[4+n:]
		size := int(smd.GetPayloadSize())
		if size > len(rest) {
			break
		}
		out = append(out, Message{Topic: topic, Producer: md.GetProducerName(), SequenceID: smd.GetSequenceId(), Payload: rest[:size],
			Key: smd.GetPartitionKey(), Properties: props(smd.GetProperties()), LedgerID: ledger, EntryID: entry, BatchIndex: i, Chunk: -1,
			SchemaVersion: md.GetSchemaVersion()})
		payload = rest[size:]
	}
	return out
}

func props(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}
