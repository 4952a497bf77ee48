package pulsar

import (
	"fmt"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Compression is a payload codec.
type Compression int

const (
	NoCompression Compression = iota
	LZ4
	ZLib
	ZStd
	Snappy
)

func (c Compression) pb() pb.CompressionType {
	switch c {
	case LZ4:
		return pb.CompressionType_LZ4
	case ZLib:
		return pb.CompressionType_ZLIB
	case ZStd:
		return pb.CompressionType_ZSTD
	case Snappy:
		return pb.CompressionType_SNAPPY
	}
	return pb.CompressionType_NONE
}

// ProducerOptions configure a Producer. Zero values take the defaults in brackets.
type ProducerOptions struct {
	// Topic to publish to; a short name means persistent://public/default/<name>.
	Topic string
	// Name of the producer; the broker chooses one when empty.
	Name string
	// SendTimeout fails a message the broker has not persisted in time [30 s], and with it
	// every message queued behind it (as the Java client does: resent after a
	// reconnection, they would be stored out of their callers' order); negative disables it.
	SendTimeout time.Duration
	// MaxPendingMessages and MaxPendingBytes bound what waits for the broker, per
	// partition; a full queue blocks SendAsync [1000, 64 MiB].
	MaxPendingMessages int
	MaxPendingBytes    int
	// DisableBatching sends every message on its own.
	DisableBatching bool
	// A batch is sent when it holds BatchingMaxMessages messages or BatchingMaxBytes
	// bytes, when BatchingMaxDelay has passed, or as soon as fewer than
	// BatchingMaxInFlight entries (batches, lone or chunked messages) await their
	// receipts [1000, 128 KiB, 10 ms, 8]. With a window above one, a message sent while
	// the broker keeps up leaves at once and messages wait to share an entry only while
	// the broker answers more slowly than they come: while the entries in flight carry a
	// message or so each, the window stretches to four times BatchingMaxInFlight entries
	// carrying as many messages (records sent one by one at a few thousand a second leave
	// at once), and once entries carry more, messages share entries (at saturation, few
	// large entries cost the broker less than many small ones). With a window of one, a
	// message sent while an entry is in flight waits for that entry's receipt. When the broker refuses
	// an entry in a way that calls for a new connection (ChecksumError), the producer
	// reads the answers to every entry written behind it before resending, so each is
	// known stored or refused whatever the window. Without deduplication the refused
	// entry, resent, is stored after the entries behind it that were stored meanwhile (as
	// with the Java client); with a window of one (and batching on) nothing is written
	// behind it.
	BatchingMaxMessages int
	BatchingMaxBytes    int
	BatchingMaxDelay    time.Duration
	BatchingMaxInFlight int
	// BatchingByKey keeps each batch to one key (a message with another key closes the
	// open batch), so Key_Shared subscriptions can route every batch by its key. Batches
	// whose messages happen to share a key carry it either way.
	BatchingByKey bool
	// Compression of batches and messages [none].
	Compression Compression
	// HashingScheme routes keyed messages to partitions [JavaStringHash, as the official Go client].
	HashingScheme HashingScheme
	// DisableChunking refuses messages above the broker's size limit instead of chunking them.
	DisableChunking bool
	// ChunkSize is the payload bytes per chunk [the broker's limit less room for metadata].
	ChunkSize int
	// MaxChunkedMessageSize bounds a chunked message [1 GiB].
	MaxChunkedMessageSize int64
	// Backoff is the reconnect schedule.
	Backoff Backoff
	// PartitionsRefreshInterval is how often a partitioned topic's partition count is
	// read again, to produce to partitions added at runtime [1 min]; negative: never.
	PartitionsRefreshInterval time.Duration
	// Deduplication makes the producer number its messages with the sequence ids the
	// caller gives (ProducerMessage.SequenceID, required then), for the broker's
	// deduplication; it needs a Name, which must stay the same across restarts. The broker
	// drops an entry whose first sequence id is not above the highest it has seen from that
	// name, so a message whose id is not above every id this producer has sent, nor above
	// the broker's last one at registration, goes in an entry of its own instead of
	// opening a batch that would hide newer messages behind it. A send timeout fails the
	// producer for good (with ErrSendTimeout) together with everything queued behind the
	// message that timed out: nothing queued after a lost message may be persisted before
	// it is sent again, or the broker would take the resent one for a duplicate.
	Deduplication bool
	// Schema is declared to the broker when the producer registers (nil: none); a
	// schema the broker refuses (IncompatibleSchema) fails the creation for good. Each
	// message then carries the schema version the broker answered with.
	Schema *Schema
	// AccessMode is the producer's access to the topic (each partition of it) [AccessShared]:
	// with AccessExclusive or AccessExclusiveWithFencing the broker lets no other producer
	// publish there while this one is registered. See ProducerAccessMode.
	AccessMode ProducerAccessMode
	// FailWhenNameBusy makes a registration refused with ProducerBusy (another producer
	// holds the Name on the topic, or an exclusive one holds the topic) fail the producer
	// for good, on a reconnect as at its creation, instead of being retried: a producer
	// that holds its name as a lease, and must learn that another one took it while its
	// connection was down. Err then wraps ErrProducerFailed and the broker's refusal.
	FailWhenNameBusy bool
}

// ProducerAccessMode is the protocol's producer_access_mode: whether a producer shares
// the topic with others. The broker applies it per partition and to every producer of
// it, whatever their names.
type ProducerAccessMode int

const (
	// AccessShared: any number of producers publish to the topic at once.
	AccessShared ProducerAccessMode = iota
	// AccessExclusive: the producer is the topic's only one; its creation fails (with
	// ErrProducerFenced) while another producer is registered there.
	AccessExclusive
	// AccessExclusiveWithFencing: the producer takes the topic over: the broker closes
	// every producer registered there, raises the topic's epoch and registers this one
	// alone. A producer fenced so (an exclusive one whose epoch is older, on its next
	// registration) fails for good with ErrProducerFenced, never reconnecting; a shared
	// one is refused with ProducerBusy, and retries, while the exclusive one is registered.
	AccessExclusiveWithFencing
)

func (m ProducerAccessMode) pb() pb.ProducerAccessMode {
	switch m {
	case AccessExclusive:
		return pb.ProducerAccessMode_Exclusive
	case AccessExclusiveWithFencing:
		return pb.ProducerAccessMode_ExclusiveWithFencing
	}
	return pb.ProducerAccessMode_Shared
}

func (o ProducerOptions) withDefaults() (ProducerOptions, error) {
	if o.PartitionsRefreshInterval == 0 {
		o.PartitionsRefreshInterval = time.Minute
	}
	if o.SendTimeout == 0 {
		o.SendTimeout = 30 * time.Second
	}
	if o.MaxPendingMessages == 0 {
		o.MaxPendingMessages = 1000
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = 64 << 20
	}
	if o.BatchingMaxMessages == 0 {
		o.BatchingMaxMessages = 1000
	}
	if o.BatchingMaxBytes == 0 {
		o.BatchingMaxBytes = 128 << 10
	}
	if o.BatchingMaxDelay == 0 {
		o.BatchingMaxDelay = 10 * time.Millisecond
	}
	if o.BatchingMaxInFlight == 0 {
		o.BatchingMaxInFlight = 8
	}
	if o.MaxChunkedMessageSize == 0 {
		o.MaxChunkedMessageSize = 1 << 30
	}
	o.Backoff = o.Backoff.withDefaults()
	switch {
	case o.MaxPendingMessages < 0 || o.MaxPendingBytes < 0:
		return o, fmt.Errorf("%w: MaxPendingMessages %d and MaxPendingBytes %d must be positive", ErrInvalidOptions, o.MaxPendingMessages, o.MaxPendingBytes)
	case o.BatchingMaxMessages < 0 || o.BatchingMaxBytes < 0 || o.BatchingMaxDelay < 0 || o.BatchingMaxInFlight < 0:
		return o, fmt.Errorf("%w: batching limits must be positive", ErrInvalidOptions)
	case o.ChunkSize < 0 || (o.ChunkSize > 0 && o.ChunkSize < 1024):
		return o, fmt.Errorf("%w: ChunkSize %d must be at least 1024 bytes", ErrInvalidOptions, o.ChunkSize)
	case o.Deduplication && o.Name == "":
		return o, fmt.Errorf("%w: Deduplication needs a producer Name", ErrInvalidOptions)
	case o.AccessMode < AccessShared || o.AccessMode > AccessExclusiveWithFencing:
		return o, fmt.Errorf("%w: unknown access mode %d", ErrInvalidOptions, o.AccessMode)
	case o.Compression < NoCompression || o.Compression > Snappy:
		return o, fmt.Errorf("%w: unknown compression %d", ErrInvalidOptions, o.Compression)
	}
	return o, nil
}

// ProducerMessage is one message to publish.
type ProducerMessage struct {
	Payload []byte
	// Key routes the message to a partition and is its partition_key.
	Key string
	// RoutingKey, for a message without Key, chooses its partition as a Key would, and is
	// not stored: keyless messages that must land on one partition whatever producer sent
	// them (a resend after a reconnect or a restart, deduplicated per partition) [none:
	// keyless messages go round-robin].
	RoutingKey string
	// OrderingKey, when set, orders Key_Shared delivery instead of Key.
	OrderingKey []byte
	Properties  map[string]string
	// Extra is one more property, its value given as bytes (read before SendAsync or
	// SendStream returns, kept nowhere): for a property every message of a hot path
	// carries, a trace context for example, without the cost of a map per message. It
	// replaces a pair of Properties with the same key [none: Extra.Key empty].
	Extra Property
	// EventTime is the application's time of the event (zero: unset).
	EventTime time.Time
	// SequenceID is the message's sequence id, given by the caller of a producer with
	// Deduplication (and only there): 0 to 2^63-1.
	SequenceID *int64
}

// Property is a message property whose value is bytes (ProducerMessage.Extra).
type Property struct {
	Key   string
	Value []byte
}
