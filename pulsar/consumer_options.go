package pulsar

import (
	"fmt"
	"io"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/framepool"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// SubscriptionType is how a subscription shares messages among its consumers.
type SubscriptionType int

const (
	Exclusive SubscriptionType = iota
	Shared
	Failover
	KeyShared
)

func (t SubscriptionType) pb() pb.CommandSubscribe_SubType {
	switch t {
	case Shared:
		return pb.CommandSubscribe_Shared
	case Failover:
		return pb.CommandSubscribe_Failover
	case KeyShared:
		return pb.CommandSubscribe_Key_Shared
	}
	return pb.CommandSubscribe_Exclusive
}

func (t SubscriptionType) String() string { return t.pb().String() }

// InitialPosition is where a new subscription starts.
type InitialPosition int

const (
	Latest InitialPosition = iota
	Earliest
)

// ConsumerOptions configure a Consumer. Zero values take the defaults in brackets.
type ConsumerOptions struct {
	// Topics to consume; partitioned topics get one consumer per partition.
	Topics []string
	// TopicsPattern, instead of Topics, consumes every persistent topic of one namespace
	// whose name matches (see TopicsPattern), as topics are created and deleted: the
	// Consumer discovers them with the broker's topic-list watcher where it has one, and
	// by listing the namespace every DiscoveryInterval in any case.
	TopicsPattern *TopicsPattern
	// NewTopicsLatest starts a new subscription on a topic the pattern matched after the
	// Consumer started at its latest message; by default it starts at the earliest, as
	// what was published there before it was discovered was published for this consumer
	// too. InitialPosition applies to the topics matched when it starts.
	NewTopicsLatest bool
	// DiscoveryInterval is how often a pattern's namespace is listed again, even while
	// the broker's watcher reports changes (it misses some while its metadata session is
	// down) [1 min].
	DiscoveryInterval time.Duration
	// Subscription name (required).
	Subscription string
	Type         SubscriptionType
	// InitialPosition of a subscription that does not exist yet [Latest].
	InitialPosition InitialPosition
	// StartTime, when set, moves the subscription (new or not) once subscribed to the
	// first message published at or after it, on every partition (SeekByTime); the
	// Java client's way is the same: a seek right after subscribing [zero: none].
	StartTime time.Time
	// StartMessageID, when set, moves the subscription (new or not) once subscribed to
	// that message (Seek; a consumer of one topic only). The protocol's start_message_id
	// applies to non-durable subscriptions only, so a durable one is moved with SEEK.
	// Not with StartTime [nil: none].
	StartMessageID *MessageID
	// Name of the consumer [chosen by the broker].
	Name string
	// ReceiverQueueSize is the flow-permit window per partition, in messages as the
	// broker counts them [1000]. It is not a memory bound: the broker sends whole entries
	// while any permit is left, so a window of 100 can hold 100 + a batch's messages less
	// one, and messages are not bounded in size (a reassembled chunked message counts
	// one). Bound memory in bytes above the client (egress's byte budget does).
	// Chunks of an incomplete message do not hold permits: reassembly is bounded by
	// MaxPendingChunkedMessages and MaxChunkedMessageSize bytes per partition.
	ReceiverQueueSize int
	// ReceiverQueueBytes, when positive, also bounds each partition's queue in bytes:
	// permits are withheld while the payload bytes queued and not yet taken, plus the
	// permits in flight at the bytes a permit is assumed to bring, would exceed it, and
	// granted again as the application takes messages. Nothing is dropped; with nothing
	// queued or in flight one permit always goes, so a message larger than the bound is
	// still delivered. A permit is assumed to bring the most bytes an arrival brought per
	// permit lately (rising at once, decaying by an eighth of the gap per smaller arrival),
	// and never less than 8 KiB, so at most ReceiverQueueBytes/8KiB permits are in flight
	// (one at a time below 8 KiB, and until the first arrival).
	//
	// It is a bound on what the client asks for, not on what the broker sends: a permit
	// may bring an entry of any size. The queue can exceed it by the permits in flight ×
	// (actual − assumed) bytes per permit, plus one batch's messages beyond the permits
	// left (the broker sends whole batches). In practice: entries of up to 8 KiB (or no
	// larger than those seen lately) keep it, but for that one batch; a jump to entries
	// of S > 8 KiB after smaller ones can add up to ReceiverQueueBytes/8KiB × (S − 8 KiB)
	// (1 MiB and 64 KiB entries: 128 × 56 KiB = 7 MiB) until those permits are used; the
	// worst case is ReceiverQueueBytes/8KiB × the broker's maxMessageSize (5 MiB by
	// default), or for compressed entries × what they decompress to (at most
	// MaxChunkedMessageSize) [0: bounded in messages only].
	ReceiverQueueBytes int
	// MemoryLimiter, when set, is a byte budget the consumer shares with the rest of the
	// process (the official Java client's MemoryLimitController does this for its
	// producers and consumers). Each queued message's payload bytes are charged to it from
	// arrival until the application takes it (or the queue drops it: a reconnect, a
	// redelivery of everything, Close), the chunks of a message being reassembled from
	// their arrival until it is whole or dropped, and FLOW permits are granted only as far
	// as it can cover them: the permits in flight are reserved at the bytes a permit is
	// assumed to bring (see ReceiverQueueBytes), and an arrival's reservation becomes the
	// charge of what it brought (all of it, so the limiter can be exceeded by the same excess);
	// a reservation nothing arrives on for a second goes back (a quiet topic's permits
	// must not hold the budget for good), and what those permits bring later is charged
	// as it arrives, beyond the limit if need be. When it
	// cannot cover them, permits are withheld and granted again as the application takes
	// messages. A partition with nothing queued and nothing in flight still gets one
	// permit (charged even beyond the limit), so a budget filled by others never stalls a
	// consumer for good. It implies ReceiverQueueBytes' byte accounting; without
	// ReceiverQueueBytes only the limiter and ReceiverQueueSize bound the permits in
	// flight, each of which may bring its excess over the assumed size [nil: none].
	MemoryLimiter MemoryLimiter
	// KeepMemoryCharge: a message taken from the queue keeps its MemoryLimiter charge,
	// which passes to the application (Message.MemoryCharge says how much) to give back
	// with Consumer.Settled when it is done with the message; the permits freed by the
	// take are granted only as far as the limiter covers them. While a taken message is
	// unsettled, a partition holding nothing gets no permit beyond the limiter either
	// (see Consumer.Settled). Without it the consumer releases the charge at the take.
	KeepMemoryCharge bool
	// AckGroupTime and AckGroupMax: individual acknowledgements are sent in groups, after
	// this long or this many [100 ms, 1000]; AckSync sends at once and waits.
	AckGroupTime time.Duration
	AckGroupMax  int
	// BatchIndexAck sends PIP-54 batch-index acknowledgements (ack_set) for partly
	// acknowledged batches; the broker must run with acknowledgmentAtBatchIndexLevelEnabled
	// (Pulsar's default is off: it ignores the ack_set and redelivers whole batches, whose
	// acknowledged members the consumer filters out while it lives, not after a reconnect).
	// Off, a batch is acknowledged when all its messages are [off].
	BatchIndexAck bool
	// NackRedeliveryDelay is how long a negatively acknowledged message waits [1 min].
	NackRedeliveryDelay time.Duration
	// MaxPendingChunkedMessages bounds the chunked messages being reassembled at once;
	// the oldest is dropped beyond it [100].
	MaxPendingChunkedMessages int
	// ChunkExpiry drops a chunked message whose chunks stop arriving [1 min].
	ChunkExpiry time.Duration
	// MaxChunkedMessageSize bounds a chunked message (reassembled, and decompressed)
	// and any compressed message or batch once decompressed, which the broker's
	// maxMessageSize does not (it bounds the payload as stored, compressed: a valid
	// message may decompress to many times it); a message announcing more is
	// discarded as malformed [256 MiB].
	MaxChunkedMessageSize int
	// DeliverUndecodable: an entry the consumer cannot decode (a checksum mismatch,
	// metadata that does not parse or validate, a payload that does not decompress, a
	// broken batch or chunk) is delivered, as one Message whose Undecodable says why, whose
	// payload is the entry's as stored (still compressed and batched) and Stored its
	// metadata, for the application to set aside before it acknowledges it; it counts
	// against the queue's bounds and the MemoryLimiter like any message. Off, such an
	// entry is acknowledged with the validation error the official clients report, and
	// is gone. Either way it is counted (ConsumerStats.Undecodable) [off].
	DeliverUndecodable bool
	// CryptoFailureAction is what becomes of an encrypted message, which this client
	// cannot decrypt [CryptoFail, as the Java client's default].
	CryptoFailureAction CryptoFailureAction
	// OnActiveChange, when set, is told when a Failover consumer becomes active or inactive.
	OnActiveChange func(topic string, active bool)
	Backoff        Backoff
	// PartitionsRefreshInterval is how often each partitioned topic's partition count is
	// read again, to consume partitions added at runtime (from their earliest message,
	// so nothing published to them before is missed) [1 min]; negative: never.
	PartitionsRefreshInterval time.Duration
}

func (o ConsumerOptions) withDefaults() (ConsumerOptions, error) {
	if o.PartitionsRefreshInterval == 0 {
		o.PartitionsRefreshInterval = time.Minute
	}
	if o.Subscription == "" {
		return o, fmt.Errorf("%w: a subscription name is required", ErrInvalidOptions)
	}
	if len(o.Topics) == 0 && o.TopicsPattern == nil {
		return o, fmt.Errorf("%w: no topic to consume", ErrInvalidOptions)
	}
	if len(o.Topics) > 0 && o.TopicsPattern != nil {
		return o, fmt.Errorf("%w: Topics and TopicsPattern %q exclude each other", ErrInvalidOptions, o.TopicsPattern)
	}
	if o.DiscoveryInterval == 0 {
		o.DiscoveryInterval = time.Minute
	}
	if o.DiscoveryInterval < 0 {
		return o, fmt.Errorf("%w: DiscoveryInterval %s is negative", ErrInvalidOptions, o.DiscoveryInterval)
	}
	if o.Type < Exclusive || o.Type > KeyShared {
		return o, fmt.Errorf("%w: unknown subscription type %d", ErrInvalidOptions, o.Type)
	}
	if o.ReceiverQueueSize == 0 {
		o.ReceiverQueueSize = 1000
	}
	if o.AckGroupTime == 0 {
		o.AckGroupTime = 100 * time.Millisecond
	}
	if o.AckGroupMax == 0 {
		o.AckGroupMax = 1000
	}
	if o.NackRedeliveryDelay == 0 {
		o.NackRedeliveryDelay = time.Minute
	}
	if o.MaxPendingChunkedMessages == 0 {
		o.MaxPendingChunkedMessages = 100
	}
	if o.ChunkExpiry == 0 {
		o.ChunkExpiry = time.Minute
	}
	if o.MaxChunkedMessageSize <= 0 {
		o.MaxChunkedMessageSize = 256 << 20
	}
	if o.CryptoFailureAction < CryptoFail || o.CryptoFailureAction > CryptoConsume {
		return o, fmt.Errorf("%w: unknown CryptoFailureAction %d", ErrInvalidOptions, o.CryptoFailureAction)
	}
	if o.StartMessageID != nil && !o.StartTime.IsZero() {
		return o, fmt.Errorf("%w: StartTime %s and StartMessageID %s are both set", ErrInvalidOptions, o.StartTime.Format(time.RFC3339Nano), o.StartMessageID)
	}
	if o.StartMessageID != nil && len(o.Topics) != 1 {
		return o, fmt.Errorf("%w: StartMessageID %s names no topic and the consumer reads %d", ErrInvalidOptions, o.StartMessageID, len(o.Topics))
	}
	if o.ReceiverQueueBytes < 0 {
		return o, fmt.Errorf("%w: ReceiverQueueBytes %d is negative", ErrInvalidOptions, o.ReceiverQueueBytes)
	}
	if o.ReceiverQueueSize < 1 || o.AckGroupMax < 1 || o.AckGroupTime < 0 || o.MaxPendingChunkedMessages < 1 {
		return o, fmt.Errorf("%w: ReceiverQueueSize %d, AckGroupMax %d and MaxPendingChunkedMessages %d must be positive",
			ErrInvalidOptions, o.ReceiverQueueSize, o.AckGroupMax, o.MaxPendingChunkedMessages)
	}
	o.Backoff = o.Backoff.withDefaults()
	return o, nil
}

// Message is one message delivered to a Consumer. Its RedeliveryCount is the broker's
// count of its entry; for a message of a batch this consumer handed back (a nack on a
// Shared or Key_Shared subscription), the count of its own hand-backs on top of the
// broker's when the batch first came (the broker counts whole entries, and forgets an
// entry's count when any message of it is acknowledged).
type Message struct {
	Topic           string // the partition's topic name
	ID              MessageID
	Key             string
	OrderingKey     []byte
	Properties      map[string]string
	ProducerName    string
	PublishTime     time.Time
	EventTime       time.Time // zero when the producer set none
	RedeliveryCount uint32
	// SchemaVersion is the version of the topic's schema the producer declared (nil:
	// none); Client.GetSchema reads it.
	SchemaVersion []byte
	// Undecodable is set on a message the consumer could not decode, delivered as
	// stored (ConsumerOptions.DeliverUndecodable): its payload is not the message.
	Undecodable *UndecodableError
	// Stored describes the entry as stored, for a message delivered without being
	// decoded: an undecodable one, or an encrypted one (CryptoConsume).
	Stored *StoredEntry

	payload []byte
	buf     *framepool.Buf // the pooled frame payload points into, until Release
	chunks  [][]byte       // a reassembled chunked message, chunk by chunk
	chunkID []MessageID    // every chunk's id, all acknowledged with the message
	pc      *partitionConsumer
	permits int    // flow permits this message stands for
	gen     uint64 // its registration's generation (see partitionConsumer.gen)
	size    int
	charged int // bytes charged to the MemoryLimiter while it is queued (under the Consumer's mu once queued)
	// With KeepMemoryCharge: the charge handed to the application with the message,
	// the consumer it is settled with, and whether it was (Consumer.Settled).
	handedCharge int
	owner        *Consumer
	settled      uint32 // 1 once settled (atomic: a Message is copied as a template before it is queued)
}

// MemoryCharge is the bytes of the message still charged to the consumer's
// MemoryLimiter and now the application's to release (with KeepMemoryCharge; 0
// otherwise, or when the consumer had closed and returned its queue's charge).
func (m *Message) MemoryCharge() int64 { return int64(m.handedCharge) }

// Payload returns the message's bytes. For a chunked message it joins the chunks
// (once); Body reads them without copying.
func (m *Message) Payload() []byte {
	if m.payload == nil && m.chunks != nil {
		buf := make([]byte, 0, m.size)
		for _, c := range m.chunks {
			buf = append(buf, c...)
		}
		m.payload, m.chunks = buf, nil
	}
	return m.payload
}

// Release tells the consumer that the application is done with m's bytes: nothing reads
// the slice Payload returned, nor a reader Body returned, nor m's payload, after it (they
// read nothing from then on: the payload is emptied). The buffer the message came in
// with others of its batch may then be reused for a later message, once every message
// pointing into it is released, which spares the collector a large allocation per
// frame. Calling it is optional: what is never released is collected as usual. m is
// still acknowledged or negatively acknowledged by its ID after Release, and its Size
// and MemoryCharge stay. A second call does nothing; Release must not run concurrently
// with another method of m.
func (m *Message) Release() {
	if b := m.buf; b != nil {
		m.buf, m.payload = nil, nil
		b.Release()
	}
}

// Size is the payload's length in bytes.
func (m *Message) Size() int { return m.size }

// Body streams the payload; for a chunked message it walks the chunks in place.
func (m *Message) Body() io.Reader {
	if m.chunks == nil {
		return &sliceReader{m.payload}
	}
	readers := make([]io.Reader, len(m.chunks))
	for i, c := range m.chunks {
		readers[i] = &sliceReader{c}
	}
	return io.MultiReader(readers...)
}

// MemoryLimiter is a byte budget shared by consumers and whatever else the application
// counts against it. TryReserve takes n bytes if used + n stays within the limit now (an
// empty limiter does not admit more than its limit); Charge takes n bytes
// whether they fit or not (bytes already in hand); Release returns bytes taken by
// either. Implementations must be safe for concurrent use and must not call back into
// the consumer.
type MemoryLimiter interface {
	TryReserve(n int64) bool
	Charge(n int64)
	Release(n int64)
}
