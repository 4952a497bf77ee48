package delivery

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SingleMetadata is the SingleMessageMetadata of one message of a batch, read into
// plain fields: proto.Unmarshal allocated the message and one pointer per scalar
// field it set (payload_size and sequence_id in every message the official clients
// batch), three allocations per message of every batch a consumer reads. It holds
// what the generated type would, with the getters' defaults for absent fields.
type SingleMetadata struct {
	Properties             []*pb.KeyValue
	PartitionKey           string
	PayloadSize            int32
	CompactedOut           bool
	EventTime              uint64
	PartitionKeyB64Encoded bool
	OrderingKey            []byte
	SequenceID             uint64
	NullValue              bool
	NullPartitionKey       bool
}

// The field numbers of SingleMessageMetadata (PulsarApi.proto).
const (
	smdProperties             = 1
	smdPartitionKey           = 2
	smdPayloadSize            = 3
	smdCompactedOut           = 4
	smdEventTime              = 5
	smdPartitionKeyB64Encoded = 6
	smdOrderingKey            = 7
	smdSequenceID             = 8
	smdNullValue              = 9
	smdNullPartitionKey       = 10
)

// readSingleMetadata decodes b as proto.Unmarshal decodes a SingleMessageMetadata: the
// same inputs are refused (FuzzReadSingleMetadata compares the two), a repeated scalar
// keeps its last value, a known field with another wire type is skipped as an unknown
// field, and so are unknown fields. It allocates only for what the message carries
// beyond numbers: a partition key, an ordering key, properties.
func readSingleMetadata(b []byte, smd *SingleMetadata) error {
	*smd = SingleMetadata{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			// ConsumeTag takes numbers up to 2^31-1; proto.Unmarshal refuses them.
			return fmt.Errorf("field number %d is above the largest valid, %d", num, protowire.MaxValidNumber)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num >= smdPayloadSize && num <= smdNullPartitionKey && num != smdOrderingKey:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			smd.setVarint(num, v)
			continue
		case typ == protowire.BytesType && (num == smdProperties || num == smdPartitionKey || num == smdOrderingKey):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			switch num {
			case smdProperties:
				kv := &pb.KeyValue{}
				if err := proto.Unmarshal(v, kv); err != nil {
					return fmt.Errorf("property: %w", err)
				}
				smd.Properties = append(smd.Properties, kv)
			case smdPartitionKey:
				smd.PartitionKey = string(v)
			default:
				smd.OrderingKey = bytes.Clone(v)
				if smd.OrderingKey == nil {
					smd.OrderingKey = []byte{}
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

func (smd *SingleMetadata) setVarint(num protowire.Number, v uint64) {
	switch num {
	case smdPayloadSize:
		smd.PayloadSize = int32(v)
	case smdCompactedOut:
		smd.CompactedOut = protowire.DecodeBool(v)
	case smdEventTime:
		smd.EventTime = v
	case smdPartitionKeyB64Encoded:
		smd.PartitionKeyB64Encoded = protowire.DecodeBool(v)
	case smdSequenceID:
		smd.SequenceID = v
	case smdNullValue:
		smd.NullValue = protowire.DecodeBool(v)
	case smdNullPartitionKey:
		smd.NullPartitionKey = protowire.DecodeBool(v)
	}
}
