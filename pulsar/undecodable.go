package pulsar

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// UndecodableReason says why a consumer could not decode an entry the broker
// delivered. Its String is a snake_case word, one per reason, fit for a metric label.
type UndecodableReason uint8

const (
	// ReasonChecksumMismatch: the payload's CRC32-C does not match the frame's.
	ReasonChecksumMismatch UndecodableReason = iota + 1
	// ReasonBadMetadata: the MessageMetadata does not parse.
	ReasonBadMetadata
	// ReasonDecompression: the payload does not decompress with the codec it names
	// (or names one the client does not know).
	ReasonDecompression
	// ReasonUncompressedSize: an uncompressed or chunked size beyond the limits.
	ReasonUncompressedSize
	// ReasonBadBatch: a batch whose count or entries do not fit its payload.
	ReasonBadBatch
	// ReasonBadChunk: a chunk whose chunk fields do not validate.
	ReasonBadChunk
	// ReasonEncrypted: an encrypted message (its metadata lists encryption keys); the
	// client cannot decrypt.
	ReasonEncrypted
	numReasons
)

var reasonNames = [numReasons]string{"", "checksum_mismatch", "bad_metadata", "decompression_error",
	"uncompressed_size_corruption", "bad_batch", "bad_chunk", "encrypted"}

func (r UndecodableReason) String() string {
	if r < numReasons && r > 0 {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason_%d", r)
}

// UndecodableReasons lists every reason, in order.
func UndecodableReasons() []UndecodableReason {
	out := make([]UndecodableReason, 0, numReasons-1)
	for r := UndecodableReason(1); r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// ErrUndecodable matches every *UndecodableError with errors.Is.
var ErrUndecodable = errors.New("pulsar: message cannot be decoded")

// UndecodableError is a message the consumer could not decode: Message.Undecodable of
// one delivered as stored (ConsumerOptions.DeliverUndecodable), or what Receive returns
// when an encrypted message stopped its partition (CryptoFail).
type UndecodableError struct {
	Topic  string
	ID     MessageID
	Reason UndecodableReason
	Err    error // the decoder's complaint; nil for ReasonEncrypted
}

func (e *UndecodableError) Error() string {
	s := fmt.Sprintf("pulsar: message %s on %s cannot be decoded (%s)", e.ID, e.Topic, e.Reason)
	if e.Reason == ReasonEncrypted {
		s += ": it is encrypted and this client cannot decrypt"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *UndecodableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUndecodable) hold.
func (e *UndecodableError) Is(target error) bool { return target == ErrUndecodable }

// StoredEntry describes an entry as the broker stored it, for a message delivered
// without being decoded (undecodable, or encrypted with CryptoConsume): what another
// client needs to decode its payload, which is the entry's payload as stored.
type StoredEntry struct {
	// Metadata is the entry's MessageMetadata as stored (protobuf), whether or not it parsed.
	Metadata []byte
	// Compression is the codec the metadata names: NONE, LZ4, ZLIB, ZSTD or SNAPPY (a
	// number for one unknown); UncompressedSize the size it announces.
	Compression      string
	UncompressedSize int
	// NumMessages is num_messages_in_batch: the payload (once decompressed) is a batch
	// of this many; 0 when the entry is not a batch.
	NumMessages int
	// EncryptionKeys are the message's data key, encrypted with each of the public keys
	// they name; EncryptionAlgo and EncryptionParam are the cipher and its parameter (the IV).
	EncryptionKeys  []EncryptionKey
	EncryptionAlgo  string
	EncryptionParam []byte
}

// EncryptionKey is an encrypted message's data key, encrypted with the public key Name.
type EncryptionKey struct {
	Name     string
	Value    []byte
	Metadata map[string]string
}

func storedEntry(raw []byte, md *pb.MessageMetadata) *StoredEntry {
	s := &StoredEntry{Metadata: raw}
	if md == nil {
		return s
	}
	s.Compression = md.GetCompression().String()
	s.UncompressedSize = int(md.GetUncompressedSize())
	if md.NumMessagesInBatch != nil {
		s.NumMessages = int(md.GetNumMessagesInBatch())
	}
	for _, k := range md.GetEncryptionKeys() {
		ek := EncryptionKey{Name: k.GetKey(), Value: k.GetValue()}
		for _, kv := range k.GetMetadata() {
			if ek.Metadata == nil {
				ek.Metadata = map[string]string{}
			}
			ek.Metadata[kv.GetKey()] = kv.GetValue()
		}
		s.EncryptionKeys = append(s.EncryptionKeys, ek)
	}
	s.EncryptionAlgo, s.EncryptionParam = md.GetEncryptionAlgo(), md.GetEncryptionParam()
	return s
}

// CryptoFailureAction is what a consumer does with an encrypted message, which it
// cannot decrypt (the Java client's ConsumerCryptoFailureAction).
type CryptoFailureAction int

const (
	// CryptoFail stops the message's partition: the message is neither delivered nor
	// acknowledged (it stays on the broker), nothing after it on the partition is
	// delivered, and Receive returns an *UndecodableError (ReasonEncrypted) naming it
	// once the messages queued before it are taken.
	CryptoFail CryptoFailureAction = iota
	// CryptoDiscard acknowledges the message (with the DecryptionError validation
	// error) without delivering it; it is counted in ConsumerStats.Undecodable.
	CryptoDiscard
	// CryptoConsume delivers the message as stored: its payload still encrypted (and
	// compressed, and batched), Message.Stored saying how, for the application to
	// decrypt.
	CryptoConsume
)

// undecodableLogEvery is how often a partition consumer logs how many more
// undecodable messages of a reason it saw since the first, which it logs at once.
var undecodableLogEvery = 10 * time.Second

// reasonLog logs undecodable messages without a line per message under a flood: the
// first of each reason at once, then a count of the others every undecodableLogEvery
// (from the partition's ticker, so it owns no timer).
type reasonLog struct {
	seen  [numReasons]bool
	more  [numReasons]int
	since time.Time
}

func (l *reasonLog) note(log *slog.Logger, now time.Time, e *UndecodableError, action string) {
	r := e.Reason
	if !l.seen[r] {
		l.seen[r] = true
		log.Warn("a message cannot be decoded", "message", e.ID.String(), "reason", r.String(), "action", action, "error", e.Error())
		if l.since.IsZero() {
			l.since = now
		}
		return
	}
	l.more[r]++
}

// flush logs the counts noted since the last flush, once undecodableLogEvery passed.
func (l *reasonLog) flush(log *slog.Logger, now time.Time) {
	if l.since.IsZero() || now.Sub(l.since) < undecodableLogEvery {
		return
	}
	for r, n := range l.more {
		if n > 0 {
			log.Warn("more messages cannot be decoded", "reason", UndecodableReason(r).String(), "messages", n, "since", l.since)
		}
	}
	l.more = [numReasons]int{}
	l.since = now
}

// undecodableReason classifies what delivery.Parse or the frame said.
func undecodableReason(frameErr error, md *pb.MessageMetadata, v pb.CommandAck_ValidationError) UndecodableReason {
	switch {
	case frameErr != nil:
		return ReasonChecksumMismatch
	case md == nil:
		return ReasonBadMetadata
	case md.GetNumChunksFromMsg() > 1 && v != pb.CommandAck_UncompressedSizeCorruption:
		return ReasonBadChunk
	}
	switch v {
	case pb.CommandAck_DecompressionError:
		return ReasonDecompression
	case pb.CommandAck_UncompressedSizeCorruption:
		return ReasonUncompressedSize
	case pb.CommandAck_ChecksumMismatch:
		return ReasonChecksumMismatch
	}
	return ReasonBadBatch
}
