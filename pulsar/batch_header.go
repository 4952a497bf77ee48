package pulsar

import (
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// batchHeader is a producer's room for a batch's metadata and SEND command while the
// batch is framed, reused from batch to batch under the producer's mu: both are encoded
// into the frame (copied) before mu is released, and nothing keeps them. Made afresh
// they were a dozen allocations per batch (the messages, a pointer for every scalar
// field, the encoded metadata), about half an allocation per 1 KiB record at
// saturation, where the batches hold a few dozen records.
type batchHeader struct {
	md   pb.MessageMetadata
	send pb.CommandSend
	cmd  pb.BaseCommand

	// The fields' values: md and send point at them.
	producerName                     string
	partitionKey                     string
	seq, publishTime, highestSeq     uint64
	producerID, sendSeq, sendHighest uint64
	numInBatch, sendNum              int32
	uncompressed                     uint32

	// mdBuf holds the encoded metadata until the frame is built (any item's, not only
	// a batch's: see appendItemLocked).
	mdBuf []byte
}

// sendType is what every SEND command's Type points at; only ever read.
var sendType = pb.BaseCommand_SEND

// batchMetadataLocked fills the header's metadata for a batch of n messages, sequence
// ids first to last: what metadataLocked and flushBatchLocked set on a new one.
func (p *partitionProducer) batchMetadataLocked(b *batch, n int) *pb.MessageMetadata {
	h := &p.header
	h.md.Reset()
	h.producerName, h.seq, h.publishTime = p.name, b.firstSeq, uint64(time.Now().UnixMilli())
	h.md.ProducerName, h.md.SequenceId, h.md.PublishTime = &h.producerName, &h.seq, &h.publishTime
	h.md.SchemaVersion = p.schemaVersion
	h.numInBatch = int32(n)
	h.md.NumMessagesInBatch = &h.numInBatch
	if n > 1 {
		h.highestSeq = b.lastSeq
		h.md.HighestSequenceId = &h.highestSeq
	}
	if b.key != "" {
		h.partitionKey = b.key
		h.md.PartitionKey = &h.partitionKey
	}
	if len(b.orderingKey) > 0 {
		h.md.OrderingKey = b.orderingKey
	}
	h.md.UncompressedSize = &h.uncompressed // compressLocked sets it
	return &h.md
}

// batchSendLocked fills the header's SEND command for a batch of n messages.
func (p *partitionProducer) batchSendLocked(b *batch, n int) *pb.CommandSend {
	h := &p.header
	h.send.Reset()
	h.producerID, h.sendSeq, h.sendNum = p.id, b.firstSeq, int32(n)
	h.send.ProducerId, h.send.SequenceId, h.send.NumMessages = &h.producerID, &h.sendSeq, &h.sendNum
	if n > 1 {
		h.sendHighest = b.lastSeq
		h.send.HighestSequenceId = &h.sendHighest
	}
	return &h.send
}

// sendCommandLocked wraps send in the header's BaseCommand.
func (p *partitionProducer) sendCommandLocked(send *pb.CommandSend) *pb.BaseCommand {
	c := &p.header.cmd
	c.Reset()
	c.Type, c.Send = &sendType, send
	return c
}
