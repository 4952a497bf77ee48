package pulsar

import (
	"encoding/binary"
	"slices"
	"strings"

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
// encoding is deterministic. It runs for every message that has properties: the pairs
// are collected in one pass over the map (on the stack for up to 8, insertion-sorted).
func appendProperties(dst []byte, num protowire.Number, props map[string]string) []byte {
	if len(props) == 0 {
		return dst
	}
	var few [8]property
	kvs := few[:0]
	for k, v := range props {
		kvs = append(kvs, property{k, v})
	}
	if len(kvs) > len(few) {
		slices.SortFunc(kvs, func(a, b property) int { return strings.Compare(a.key, b.key) })
	} else {
		for i := 1; i < len(kvs); i++ {
			for j := i; j > 0 && kvs[j].key < kvs[j-1].key; j-- {
				kvs[j], kvs[j-1] = kvs[j-1], kvs[j]
			}
		}
	}
	for _, kv := range kvs {
		size := protowire.SizeTag(1) + protowire.SizeBytes(len(kv.key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(kv.value))
		dst = protowire.AppendTag(dst, num, protowire.BytesType)
		dst = protowire.AppendVarint(dst, uint64(size))
		dst = protowire.AppendTag(dst, 1, protowire.BytesType)
		dst = protowire.AppendString(dst, kv.key)
		dst = protowire.AppendTag(dst, 2, protowire.BytesType)
		dst = protowire.AppendString(dst, kv.value)
	}
	return dst
}

type property struct{ key, value string }
