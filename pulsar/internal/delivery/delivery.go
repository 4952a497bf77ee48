// Package delivery interprets one message the broker delivered to a consumer: its
// metadata, compression, batch and chunk fields. Every count and size read from the
// wire is checked against the frame or the limits before anything is allocated from
// it, and a malformed message is an *Error naming the validation error to report in
// the ACK (as the official clients do), never a panic. It is pure — no sockets, no
// state — so it can be fuzzed.
package delivery

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/compress"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// ErrMalformed matches every *Error with errors.Is.
var ErrMalformed = errors.New("pulsar: malformed message")

// Error is a delivered message that does not validate: the consumer acknowledges it
// with Reason and goes on.
type Error struct {
	Reason pb.CommandAck_ValidationError
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("pulsar: malformed message (%s): %s", e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrMalformed) hold.
func (e *Error) Is(target error) bool { return target == ErrMalformed }

func malformed(reason pb.CommandAck_ValidationError, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Limits bound what one delivery may make the consumer allocate.
type Limits struct {
	// MaxMessageSize is the broker's limit (max_message_size in CONNECTED): the payload
	// of an entry that is not a chunk, as stored (compressed, if it is), is never larger.
	// It does not bound what the payload decompresses to: a producer checks its message
	// against the limit once compressed (the Java client does), so a valid compressed
	// message or batch may decompress to many times the limit.
	MaxMessageSize int
	// MaxChunkedMessageSize bounds what one message may make the consumer hold that the
	// broker's limit does not: a chunked message as a whole (its total_chunk_msg_size)
	// and any compressed entry, chunked or not, once decompressed (its
	// uncompressed_size). Each codec's expansion bound (compress.Decompress) refuses an
	// uncompressed_size the payload cannot reach before anything is allocated.
	MaxChunkedMessageSize int
	// Admit, when set, is asked before an entry is decompressed to more than
	// MaxMessageSize (the only entries the broker's limit does not bound once
	// decompressed), with that uncompressed size: false leaves the entry Deferred,
	// validated as far as it can be without decompressing it. Nil admits every entry.
	Admit func(uncompressed int) bool
	// DeferAll leaves every entry whose metadata parses Deferred, neither decompressed
	// nor split (its Permits set): for the consumer to keep an entry in order behind
	// one deferred before it.
	DeferAll bool
}

// Kind says how to deliver an Entry.
type Kind uint8

const (
	// Single is one message; Entry.Payload is its decompressed payload.
	Single Kind = iota
	// Batch holds Entry.Messages.
	Batch
	// Chunk is one chunk of a larger message; Entry.Payload is the chunk as sent
	// (a compressed message is decompressed once reassembled: see Decompress).
	Chunk
	// Deferred is an entry left as stored (see Limits.Admit and Limits.DeferAll):
	// Entry.Payload is the payload as stored; Parse it again to deliver it.
	Deferred
	// Encrypted is an entry whose metadata lists encryption keys: Entry.Payload is the
	// payload as stored (producers compress, then encrypt), neither decrypted nor
	// decompressed nor split into its batch's messages.
	Encrypted
)

// Entry is one delivered entry, validated.
type Entry struct {
	Kind Kind
	// Metadata is the entry's metadata; nil only when it did not parse.
	Metadata *pb.MessageMetadata
	// Permits is what the entry cost in flow permits: 1, or num_messages_in_batch.
	// On an error it is still set, for the consumer to return: the broker charged the
	// count the metadata claims, however absurd, and the official clients return that
	// much (anything less stalls the subscription; the count is at most 2^31-1).
	Permits int
	// Payload: the message (Single) or the chunk (Chunk).
	Payload []byte
	// Messages: the batch's messages still to deliver (Batch), in index order.
	Messages []Message
	// BatchSize is num_messages_in_batch (Batch).
	BatchSize int
	// Skipped counts the batch's indexes left out: acknowledged already (the ack_set
	// of PIP-54) or compacted out.
	Skipped int
	// Chunk describes a chunk (Chunk).
	Chunk ChunkInfo
}

// Message is one message of a batch.
type Message struct {
	Index    int
	Metadata SingleMetadata
	Payload  []byte // aliases the entry's (decompressed) payload
}

// ChunkInfo is where a chunk belongs.
type ChunkInfo struct {
	UUID      string
	ID        int // 0 ≤ ID < Count
	Count     int // num_chunks_from_msg ≥ 2
	TotalSize int // total_chunk_msg_size: the reassembled size, before decompression
}

// Parse validates and interprets one delivered entry: metadata is the raw
// MessageMetadata, payload the rest of the frame, ackSet the CommandMessage's ack_set.
// The returned payloads alias payload or a buffer Parse allocated within the limits.
func Parse(metadata, payload []byte, ackSet []int64, lim Limits) (Entry, error) {
	e := Entry{Permits: 1}
	md := &pb.MessageMetadata{}
	if err := proto.Unmarshal(metadata, md); err != nil {
		// What the official clients answer for metadata that does not parse.
		return e, malformed(pb.CommandAck_ChecksumMismatch, "metadata: %v", err)
	}
	e.Metadata = md
	if md.NumMessagesInBatch != nil {
		e.Permits = max(1, int(md.GetNumMessagesInBatch()))
	}
	if lim.DeferAll {
		e.Kind, e.Payload = Deferred, payload
		return e, nil
	}
	if len(md.GetEncryptionKeys()) > 0 {
		// Nothing past the metadata can be read without the private key.
		e.Kind, e.Payload = Encrypted, payload
		return e, nil
	}
	if md.GetNumChunksFromMsg() > 1 {
		return e, parseChunk(&e, md, payload, lim)
	}
	// As the Java client checks it: the broker stored no payload above its limit, so one
	// is corrupt. The limit bounds the payload as stored, not what it decompresses to.
	if len(payload) > lim.MaxMessageSize {
		return e, malformed(pb.CommandAck_UncompressedSizeCorruption, "a %d-byte payload is above the broker's limit %d", len(payload), lim.MaxMessageSize)
	}
	if md.GetCompression() != pb.CompressionType_NONE && int64(md.GetUncompressedSize()) > int64(lim.MaxChunkedMessageSize) {
		return e, malformed(pb.CommandAck_UncompressedSizeCorruption, "uncompressed size %d is above the limit %d", md.GetUncompressedSize(), lim.MaxChunkedMessageSize)
	}
	if n := int(md.GetUncompressedSize()); md.GetCompression() != pb.CompressionType_NONE && n > lim.MaxMessageSize && lim.Admit != nil {
		// What can be refused without decompressing is refused before the consumer
		// waits for room for it.
		if err := compress.Check(md.GetCompression(), payload, n, lim.MaxChunkedMessageSize); err != nil {
			return e, malformed(pb.CommandAck_DecompressionError, "%v", err)
		}
		if !lim.Admit(n) {
			e.Kind, e.Payload = Deferred, payload
			return e, nil
		}
	}
	out, err := compress.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize()), lim.MaxChunkedMessageSize)
	if err != nil {
		return e, malformed(pb.CommandAck_DecompressionError, "%v", err)
	}
	if md.NumMessagesInBatch == nil {
		e.Kind, e.Payload = Single, out
		return e, nil
	}
	return e, parseBatch(&e, md, out, ackSet, lim)
}

// batchEntryMin is the smallest batch entry: a 4-byte metadata size, empty metadata
// and an empty payload. It bounds a believable num_messages_in_batch by the payload.
const batchEntryMin = 4

// parseBatch splits a batch into its messages. Their number is bounded by the broker's
// limit (one per batchEntryMin bytes of it), not only by the batch decompressed: each
// costs the consumer its parsed metadata and a message, far more than its bytes and
// charged to no budget when its payload is empty, and a few kilobytes of a compressed
// batch may announce MaxChunkedMessageSize of empty messages.
func parseBatch(e *Entry, md *pb.MessageMetadata, payload []byte, ackSet []int64, lim Limits) error {
	n := int(md.GetNumMessagesInBatch())
	if n < 1 || n > len(payload)/batchEntryMin {
		return malformed(pb.CommandAck_BatchDeSerializeError, "num_messages_in_batch %d does not fit a %d-byte batch", n, len(payload))
	}
	if most := lim.MaxMessageSize / batchEntryMin; n > most {
		return malformed(pb.CommandAck_BatchDeSerializeError, "num_messages_in_batch %d is above the %d a batch within the broker's limit %d can hold", n, most, lim.MaxMessageSize)
	}
	if words := (n + 63) / 64; len(ackSet) > words {
		return malformed(pb.CommandAck_BatchDeSerializeError, "ack_set has %d words for a batch of %d", len(ackSet), n)
	}
	msgs := make([]Message, 0, n)
	for i := range n {
		if len(payload) < 4 {
			return malformed(pb.CommandAck_BatchDeSerializeError, "batch entry %d of %d: truncated", i, n)
		}
		size := binary.BigEndian.Uint32(payload)
		if uint64(size) > uint64(len(payload)-4) {
			return malformed(pb.CommandAck_BatchDeSerializeError, "batch entry %d of %d: metadata size %d exceeds the batch", i, n, size)
		}
		msgs = append(msgs, Message{Index: i})
		m := &msgs[len(msgs)-1]
		if err := readSingleMetadata(payload[4:4+size], &m.Metadata); err != nil {
			return malformed(pb.CommandAck_BatchDeSerializeError, "batch entry %d of %d: %v", i, n, err)
		}
		rest := payload[4+size:]
		psize := int64(m.Metadata.PayloadSize)
		if psize < 0 || psize > int64(len(rest)) {
			return malformed(pb.CommandAck_BatchDeSerializeError, "batch entry %d of %d: payload size %d does not fit the %d bytes left", i, n, psize, len(rest))
		}
		body := rest[:psize:psize]
		payload = rest[psize:]
		acked := len(ackSet) > 0 && (i/64 >= len(ackSet) || ackSet[i/64]&(1<<(i%64)) == 0)
		if acked || m.Metadata.CompactedOut {
			e.Skipped++
			msgs = msgs[:len(msgs)-1]
			continue
		}
		m.Payload = body
	}
	e.Kind, e.Messages, e.BatchSize, e.Permits = Batch, msgs, n, n
	return nil
}

func parseChunk(e *Entry, md *pb.MessageMetadata, payload []byte, lim Limits) error {
	c := ChunkInfo{UUID: md.GetUuid(), ID: int(md.GetChunkId()), Count: int(md.GetNumChunksFromMsg()), TotalSize: int(md.GetTotalChunkMsgSize())}
	switch {
	case md.NumMessagesInBatch != nil:
		return malformed(pb.CommandAck_BatchDeSerializeError, "a chunk that says it is a batch of %d", md.GetNumMessagesInBatch())
	case c.UUID == "":
		return malformed(pb.CommandAck_BatchDeSerializeError, "a chunk without a uuid")
	case c.ID < 0 || c.ID >= c.Count:
		return malformed(pb.CommandAck_BatchDeSerializeError, "chunk id %d of %d", c.ID, c.Count)
	case c.TotalSize < c.Count || c.TotalSize > lim.MaxChunkedMessageSize:
		return malformed(pb.CommandAck_UncompressedSizeCorruption, "total_chunk_msg_size %d for %d chunks (the limit is %d)", c.TotalSize, c.Count, lim.MaxChunkedMessageSize)
	case len(payload) > c.TotalSize:
		return malformed(pb.CommandAck_UncompressedSizeCorruption, "a %d-byte chunk of a %d-byte message", len(payload), c.TotalSize)
	case md.GetCompression() != pb.CompressionType_NONE && int64(md.GetUncompressedSize()) > int64(lim.MaxChunkedMessageSize):
		return malformed(pb.CommandAck_UncompressedSizeCorruption, "uncompressed size %d is above the limit %d", md.GetUncompressedSize(), lim.MaxChunkedMessageSize)
	}
	e.Kind, e.Payload, e.Chunk, e.Permits = Chunk, payload, c, 1
	return nil
}

// Decompress decompresses a reassembled chunked message whose first chunk carried md.
func Decompress(md *pb.MessageMetadata, payload []byte, lim Limits) ([]byte, error) {
	out, err := compress.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize()), lim.MaxChunkedMessageSize)
	if err != nil {
		return nil, malformed(pb.CommandAck_DecompressionError, "%v", err)
	}
	return out, nil
}
