package pulsar

import (
	"encoding/binary"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// appendSingleMessage appends one batch entry, [u32 size][SingleMessageMetadata][payload],
// encoding the metadata by hand: it runs once per message on the hot path.
// singleMessageBound is at least how many bytes appendSingleMessage appends for m.
func singleMessageBound(m *ProducerMessage) int {
	n := 4 + len(m.Payload) + len(m.Key) + len(m.OrderingKey) + 48 // tags, lengths and varints
	for k, v := range m.Properties {
		n += len(k) + len(v) + 16
	}
	if m.Extra.Key != "" {
		n += len(m.Extra.Key) + len(m.Extra.Value) + 16
	}
	return n
}

func appendSingleMessage(dst []byte, seq uint64, m *ProducerMessage) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendProperties(dst, 1, m.Properties, m.Extra)
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
// encoding is deterministic: props' pairs and extra (when its key is set; it replaces
// props' pair of that key). It runs for every message that has properties: the pairs
// are collected in one pass over the map (on the stack for up to 8, insertion-sorted).
func appendProperties(dst []byte, num protowire.Number, props map[string]string, extra Property) []byte {
	if len(props) == 0 {
		if extra.Key != "" {
			dst = appendProperty(dst, num, extra.Key, extra.Value)
		}
		return dst
	}
	var few [8]property
	kvs := sortedProperties(few[:0], props, extra.Key)
	pending := extra.Key != ""
	for _, kv := range kvs {
		if pending && extra.Key < kv.key {
			dst, pending = appendProperty(dst, num, extra.Key, extra.Value), false
		}
		dst = appendProperty(dst, num, kv.key, kv.value)
	}
	if pending {
		dst = appendProperty(dst, num, extra.Key, extra.Value)
	}
	return dst
}

// sortedProperties appends props' pairs but the one of key skip to kvs, in key order.
func sortedProperties(kvs []property, props map[string]string, skip string) []property {
	for k, v := range props {
		if skip == "" || k != skip {
			kvs = append(kvs, property{k, v})
		}
	}
	if len(kvs) > 8 {
		slices.SortFunc(kvs, func(a, b property) int { return strings.Compare(a.key, b.key) })
	} else {
		for i := 1; i < len(kvs); i++ {
			for j := i; j > 0 && kvs[j].key < kvs[j-1].key; j-- {
				kvs[j], kvs[j-1] = kvs[j-1], kvs[j]
			}
		}
	}
	return kvs
}

// appendProperty appends one KeyValue as field num.
func appendProperty[V string | []byte](dst []byte, num protowire.Number, key string, value V) []byte {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(value))
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	dst = protowire.AppendString(dst, key)
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(len(value)))
	return append(dst, value...)
}

type property struct{ key, value string }
