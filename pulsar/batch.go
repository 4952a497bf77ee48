package pulsar

import (
	"encoding/binary"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// appendSingleMessage appends one batch entry, [u32 size][SingleMessageMetadata][payload],
// encoding the metadata by hand: it runs once per message on the hot path.
func appendSingleMessage(dst []byte, seq uint64, m *ProducerMessage) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendProperties(dst, 1, m.Properties)
	if m.Key != "" {
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		dst = protowire.AppendString(dst, m.Key)
	}
	dst = protowire.AppendTag(dst, 3, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(int64(int32(len(m.Payload)))))
	if !m.EventTime.IsZero() {
		dst = protowire.AppendTag(dst, 5, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(m.EventTime.UnixMilli()))
	}
	if len(m.OrderingKey) > 0 {
		dst = protowire.AppendTag(dst, 7, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.OrderingKey)
	}
	dst = protowire.AppendTag(dst, 8, protowire.VarintType)
	dst = protowire.AppendVarint(dst, seq)
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return append(dst, m.Payload...)
}

// appendProperties appends repeated KeyValue field num, in key order so that the
// encoding is deterministic.
func appendProperties(dst []byte, num protowire.Number, props map[string]string) []byte {
	if len(props) == 0 {
		return dst
	}
	var few [8]string // most messages have a few properties: no allocation for the keys
	keys := few[:0]
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := props[k]
		size := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(size))
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendString(dst, k)
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		dst = protowire.AppendString(dst, v)
	}
	return dst
}
