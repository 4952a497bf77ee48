package frame

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// sendReceipt is a SEND_RECEIPT command decoded in one allocation: proto.Unmarshal made
// the BaseCommand, the CommandSendReceipt, the MessageIdData and a pointer for each
// scalar field set, about ten allocations for the answer to every entry a producer
// sends. The messages point into the same block for their fields.
type sendReceipt struct {
	cmd                                            pb.BaseCommand
	r                                              pb.CommandSendReceipt
	id                                             pb.MessageIdData
	typ                                            pb.BaseCommand_Type
	producerID, sequenceID, highestSeq, ledger, en uint64
	partition, batchIndex, batchSize               int32
}

// The field numbers of the commands decodeSendReceipt reads (PulsarApi.proto).
const (
	baseType        = 1
	baseSendReceipt = 7

	receiptProducerID = 1
	receiptSequenceID = 2
	receiptMessageID  = 3
	receiptHighestSeq = 4

	idLedger     = 1
	idEntry      = 2
	idPartition  = 3
	idBatchIndex = 4
	idBatchSize  = 6
)

// decodeSendReceipt decodes b as proto.Unmarshal would when b is a SEND_RECEIPT as
// brokers write it: each known field once, with its own wire type, and nothing else.
// It returns false for anything else (another command, an unknown or repeated field,
// a message id with an ack set or a first chunk's id, bytes that do not parse), which
// the caller hands to proto.Unmarshal: what it returns is what proto.Unmarshal returns
// for the same bytes, and input it refuses is refused by proto.Unmarshal with its own
// error (FuzzDecodeSendReceipt compares the two).
func decodeSendReceipt(b []byte) (*pb.BaseCommand, bool) {
	var (
		seen    uint32 // BaseCommand's fields, bit by number
		typ     uint64
		receipt []byte
	)
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 || (num != baseType && num != baseSendReceipt) || seen&(1<<num) != 0 {
			return nil, false
		}
		seen |= 1 << num
		b = b[n:]
		if num == baseType {
			if wt != protowire.VarintType {
				return nil, false
			}
			typ, n = protowire.ConsumeVarint(b)
		} else {
			if wt != protowire.BytesType {
				return nil, false
			}
			receipt, n = protowire.ConsumeBytes(b)
		}
		if n < 0 {
			return nil, false
		}
		b = b[n:]
	}
	if seen&(1<<baseType) == 0 || pb.BaseCommand_Type(typ) != pb.BaseCommand_SEND_RECEIPT || seen&(1<<baseSendReceipt) == 0 {
		return nil, false
	}
	s := &sendReceipt{typ: pb.BaseCommand_SEND_RECEIPT}
	s.cmd.Type, s.cmd.SendReceipt = &s.typ, &s.r
	var idBytes []byte
	seen = 0
	for len(receipt) > 0 {
		num, wt, n := protowire.ConsumeTag(receipt)
		if n < 0 || num < receiptProducerID || num > receiptHighestSeq || seen&(1<<num) != 0 {
			return nil, false
		}
		seen |= 1 << num
		receipt = receipt[n:]
		if num == receiptMessageID {
			if wt != protowire.BytesType {
				return nil, false
			}
			idBytes, n = protowire.ConsumeBytes(receipt)
			if n < 0 {
				return nil, false
			}
			receipt = receipt[n:]
			s.r.MessageId = &s.id
			continue
		}
		if wt != protowire.VarintType {
			return nil, false
		}
		v, n := protowire.ConsumeVarint(receipt)
		if n < 0 {
			return nil, false
		}
		receipt = receipt[n:]
		switch num {
		case receiptProducerID:
			s.producerID, s.r.ProducerId = v, &s.producerID
		case receiptSequenceID:
			s.sequenceID, s.r.SequenceId = v, &s.sequenceID
		case receiptHighestSeq:
			s.highestSeq, s.r.HighestSequenceId = v, &s.highestSeq
		}
	}
	seen = 0
	for len(idBytes) > 0 {
		num, wt, n := protowire.ConsumeTag(idBytes)
		if n < 0 || wt != protowire.VarintType || num < idLedger || num > idBatchSize || num == 5 || seen&(1<<num) != 0 {
			return nil, false // ack_set (5) and first_chunk_message_id (7) are left to proto.Unmarshal
		}
		seen |= 1 << num
		idBytes = idBytes[n:]
		v, n := protowire.ConsumeVarint(idBytes)
		if n < 0 {
			return nil, false
		}
		idBytes = idBytes[n:]
		switch num {
		case idLedger:
			s.ledger, s.id.LedgerId = v, &s.ledger
		case idEntry:
			s.en, s.id.EntryId = v, &s.en
		case idPartition:
			s.partition, s.id.Partition = int32(v), &s.partition // an int32 is the varint's low 32 bits
		case idBatchIndex:
			s.batchIndex, s.id.BatchIndex = int32(v), &s.batchIndex
		case idBatchSize:
			s.batchSize, s.id.BatchSize = int32(v), &s.batchSize
		}
	}
	return &s.cmd, true
}
