package config

import (
	"fmt"
	"time"
)

// Egress holds the limits of subscription streams.
type Egress struct {
	MaxStreams int `yaml:"maxStreams"` // 1000 concurrent streams; more get 429
	// WriteTimeout disconnects a client that has not taken a write for this long; its
	// unacknowledged messages are redelivered.
	WriteTimeout Duration `yaml:"writeTimeout"` // 30s
}

// Stream is one egress endpoint: a subscription streamed to HTTP clients.
type Stream struct {
	Name string `yaml:"name"` // required; unique
	// Path of the endpoint [/v1/streams/<name>]; acknowledgements go to <path>/ack.
	Path   string   `yaml:"path"`
	Topics []string `yaml:"topics"` // required, or topicsPattern
	// TopicsPattern, instead of topics, streams every persistent topic of one namespace
	// whose name matches: persistent://tenant/namespace/<regex>, the regular expression
	// matching the whole topic name without its scheme and partition suffix (as the
	// Java client's pattern consumer does); topics created and deleted while the stream
	// runs are followed.
	TopicsPattern string `yaml:"topicsPattern"`
	// NewTopicsPosition is where the subscription starts on a topic the pattern matched
	// after the stream started: earliest or latest [earliest]. Position applies to the
	// topics matched when the stream starts.
	NewTopicsPosition string `yaml:"newTopicsPosition"`
	// DiscoveryInterval is how often a pattern's namespace is listed again, even while
	// the broker's topic-list watcher reports changes, and the only discovery on a
	// broker without watchers [60s].
	DiscoveryInterval Duration `yaml:"discoveryInterval"`
	// Subscription name [bridge-<name>].
	Subscription string `yaml:"subscription"`
	// Type of the subscription: exclusive, shared, failover or key_shared [exclusive].
	Type string `yaml:"type"`
	// Position is where the stream reads from: earliest or latest (where a subscription
	// that does not exist yet starts), an RFC 3339 time or id:ledger:entry:partition:batchIndex
	// (the subscription, new or not, is moved there with SEEK each time a stream opens) [latest].
	Position string `yaml:"position"`
	// AllowSeekShared lets a time or id position and POST <path>/seek move a shared,
	// key_shared or failover subscription: a seek moves the cursor every consumer of the
	// subscription reads from, so it is refused (409) on those types unless allowed [false].
	AllowSeekShared bool `yaml:"allowSeekShared"`
	// ContentType of the records (Message-Content-Type with envelope none) [application/json].
	ContentType string `yaml:"contentType"`
	// Ack is auto (after the record is written and flushed) or client (POST <path>/ack; needs
	// envelope json, whose records carry the ids to acknowledge) [auto].
	Ack string `yaml:"ack"`
	// Envelope is none (the payload as published) or json (id, key, properties, times and payload) [none].
	Envelope string `yaml:"envelope"`
	// Overrides lists the query parameters a client may use: subscription, position, ack, envelope [none].
	Overrides []string `yaml:"overrides"`
	// Heartbeat is written when the stream has been idle for HeartbeatInterval [off].
	HeartbeatInterval Duration `yaml:"heartbeatInterval"`
	Heartbeat         string   `yaml:"heartbeat"` // the record, e.g. {"type":"HEARTBEAT"}
	// ReceiverQueue is the flow-permit window per partition: what a client that stops
	// reading can hold in memory [1000].
	ReceiverQueue int `yaml:"receiverQueue"`
	// ReceiverQueueBytes bounds the same queue in payload bytes per partition: flow
	// permits are withheld while the bytes queued plus the permits in flight (at the
	// bytes a message brought so far) would exceed it; one message larger than it still
	// comes [1MiB]. The queues are charged to memory.budget too.
	ReceiverQueueBytes Size `yaml:"receiverQueueBytes"`
	// MaxPendingChunkedMessages bounds the chunked messages a consumer reassembles at once
	// per partition; beyond it the oldest incomplete one is dropped, its chunks
	// acknowledged [100]. The chunks held are charged to memory.budget, which bounds
	// their bytes.
	MaxPendingChunkedMessages int `yaml:"maxPendingChunkedMessages"`
	// AckTimeout redelivers a message a client (ack=client) has not acknowledged in time [30s].
	AckTimeout Duration `yaml:"ackTimeout"`
	// MaxUnacked stops delivery to an ack=client stream with this many messages unacknowledged [1000].
	MaxUnacked int `yaml:"maxUnacked"`
	// MaxRate limits the stream to this many records per second [0: no limit]; a limited
	// stream keeps its backlog on the broker.
	MaxRate float64 `yaml:"maxRate"`
	// MaxByteRate limits the stream's payload bytes per second [0: no limit].
	MaxByteRate int64 `yaml:"maxByteRate"`
	// CryptoFailure is what becomes of an encrypted message, which the bridge cannot
	// decrypt (the Java client's ConsumerCryptoFailureAction): fail ends the stream with
	// an error naming the message, leaving it unacknowledged; discard acknowledges it
	// (counted); deliver writes it as stored, still encrypted [fail].
	CryptoFailure string `yaml:"cryptoFailure"`
	// Retry is how a message a client negatively acknowledges (POST <path>/nack), or
	// does not acknowledge within AckTimeout, is delivered again.
	Retry Retry `yaml:"retry"`
	// Filter keeps only the messages matching one of its alternatives; the others are
	// acknowledged without being written [none: every message is delivered].
	Filter *Filter `yaml:"filter"`
	// AckReceipt (ack=client): /ack answers 200 once the broker has confirmed the
	// acknowledgement (the protocol's ack receipts); false answers once it is queued for
	// the next group sent, before the broker has it [true].
	AckReceipt *bool `yaml:"ackReceipt"`
}

// Retry is a stream's redelivery discipline: a failed message comes back after a delay
// that grows with its redelivery count.
type Retry struct {
	// Initial is the delay before the first redelivery [1s].
	Initial Duration `yaml:"initial"`
	// Multiplier grows the delay at each further attempt [1.6].
	Multiplier float64 `yaml:"multiplier"`
	// Jitter spreads each delay by up to this fraction either way, 0 to 1 [0.2].
	Jitter *float64 `yaml:"jitter"`
	// Max caps the delay [120s].
	Max Duration `yaml:"max"`
	// MaxDeliveries moves a message delivered this many times without an
	// acknowledgement to DeadLetterTopic, then acknowledges it [0: never]. Shared and
	// key_shared subscriptions only: the broker counts redeliveries on those alone.
	MaxDeliveries int `yaml:"maxDeliveries"`
	// DeadLetterTopic receives those messages [<topic>-<subscription>-DLQ].
	DeadLetterTopic string `yaml:"deadLetterTopic"`
}

// WithDefaults returns r with every empty key set to its default.
func (r Retry) WithDefaults() Retry {
	if r.Initial == 0 {
		r.Initial = Duration(time.Second)
	}
	if r.Multiplier == 0 {
		r.Multiplier = 1.6
	}
	if r.Jitter == nil {
		j := 0.2
		r.Jitter = &j
	}
	if r.Max == 0 {
		r.Max = Duration(120 * time.Second)
	}
	return r
}

// WithDefaults returns the stream with every empty key set to its default.
func (s Stream) WithDefaults() Stream {
	if s.Path == "" && s.Name != "" {
		s.Path = "/v1/streams/" + s.Name
	}
	if s.Subscription == "" && s.Name != "" {
		s.Subscription = "bridge-" + s.Name
	}
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.Type, "exclusive")
	def(&s.Position, "latest")
	def(&s.ContentType, "application/json")
	def(&s.Ack, "auto")
	def(&s.Envelope, "none")
	def(&s.CryptoFailure, "fail")
	def(&s.NewTopicsPosition, "earliest")
	if s.DiscoveryInterval == 0 {
		s.DiscoveryInterval = Duration(time.Minute)
	}
	if s.ReceiverQueue == 0 {
		s.ReceiverQueue = 1000
	}
	if s.ReceiverQueueBytes == 0 {
		s.ReceiverQueueBytes = 1 << 20
	}
	if s.MaxPendingChunkedMessages == 0 {
		s.MaxPendingChunkedMessages = 100
	}
	if s.AckTimeout == 0 {
		s.AckTimeout = Duration(30 * time.Second)
	}
	if s.MaxUnacked == 0 {
		s.MaxUnacked = 1000
	}
	s.Retry = s.Retry.WithDefaults()
	if s.AckReceipt == nil {
		t := true
		s.AckReceipt = &t
	}
	return s
}

// maxPendingChunked caps streams[].maxPendingChunkedMessages: each message being
// reassembled keeps its chunks' ids and metadata besides the bytes the budget counts.
const maxPendingChunked = 10000

func validateStreams(streams []Stream, routes []Route) Problems {
	var p Problems
	add := p.Addf
	names := map[string]int{}
	paths := map[string]string{}
	for i, r := range routes {
		paths[r.EffectivePath()] = fmt.Sprintf("routes[%d]", i)
	}
	oneOf := func(at, key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		add("%s.%s: %q is not one of %v", at, key, v, allowed)
	}
	for i, raw := range streams {
		at := fmt.Sprintf("streams[%d]", i)
		s := raw.WithDefaults()
		if s.Name == "" {
			add("%s.name: missing; every stream needs a name", at)
		} else if j, dup := names[s.Name]; dup {
			add("%s.name: %q is also the name of streams[%d]", at, s.Name, j)
		} else {
			names[s.Name] = i
		}
		if s.Path != "" {
			if s.Path[0] != '/' {
				add("%s.path: %q must start with /", at, s.Path)
			} else if other, dup := paths[s.Path]; dup {
				add("%s.path: %q is also the path of %s", at, s.Path, other)
			} else {
				paths[s.Path] = at
				paths[s.Path+"/ack"] = at
				paths[s.Path+"/nack"] = at
				paths[s.Path+"/seek"] = at
			}
		}
		switch {
		case len(s.Topics) == 0 && s.TopicsPattern == "":
			add("%s.topics: missing; list the topics the stream reads, or match them with topicsPattern", at)
		case len(s.Topics) > 0 && s.TopicsPattern != "":
			add("%s.topicsPattern: %q and topics exclude each other; a stream reads the topics listed or those the pattern matches", at, s.TopicsPattern)
		}
		oneOf(at, "newTopicsPosition", s.NewTopicsPosition, "earliest", "latest")
		if s.DiscoveryInterval < Duration(time.Second) {
			add("%s.discoveryInterval: %v must be at least 1s (how often a pattern's namespace is listed again)", at, s.DiscoveryInterval.D())
		}
		if s.TopicsPattern != "" && s.Retry.MaxDeliveries > 0 && s.Retry.DeadLetterTopic == "" {
			add("%s.retry.deadLetterTopic: required with topicsPattern: the default <topic>-<subscription>-DLQ is created in the pattern's namespace, where the pattern may match it", at)
		}
		oneOf(at, "type", s.Type, "exclusive", "shared", "failover", "key_shared")
		if pos, err := ParsePosition(s.Position); err != nil {
			add("%s.position: %v", at, err)
		} else if pos.Seeks() && s.Type != "exclusive" && !s.AllowSeekShared {
			add("%s.position: %q moves the subscription with SEEK, which moves every consumer of a %s subscription; set allowSeekShared: true to allow it", at, s.Position, s.Type)
		} else if pos.ID != "" && len(s.Topics) > 1 {
			add("%s.position: %q names no topic and the stream reads %d; an id position needs a stream of one topic", at, s.Position, len(s.Topics))
		}
		oneOf(at, "ack", s.Ack, "auto", "client")
		oneOf(at, "envelope", s.Envelope, "none", "json")
		oneOf(at, "cryptoFailure", s.CryptoFailure, "fail", "discard", "deliver")
		for _, o := range s.Overrides {
			oneOf(at, "overrides", o, "subscription", "position", "ack", "envelope")
		}
		if s.HeartbeatInterval > 0 && s.Heartbeat == "" {
			add("%s.heartbeat: missing; heartbeatInterval needs the record to send, e.g. '{\"type\":\"HEARTBEAT\"}'", at)
		}
		if s.ReceiverQueue < 0 || s.MaxUnacked < 0 {
			add("%s: receiverQueue and maxUnacked must be positive", at)
		}
		if s.ReceiverQueueBytes < 0 {
			add("%s.receiverQueueBytes: %d must be greater than zero (bytes per partition, e.g. 1MiB; 0 or absent: the default 1MiB)", at, int64(s.ReceiverQueueBytes))
		}
		if s.MaxPendingChunkedMessages < 0 || s.MaxPendingChunkedMessages > maxPendingChunked {
			add("%s.maxPendingChunkedMessages: %d must be within 1..%d (chunked messages reassembled at once per partition; 0 or absent: the default 100)",
				at, s.MaxPendingChunkedMessages, maxPendingChunked)
		}
		if r := s.Retry; r.Initial < 0 || r.Max < r.Initial || r.Multiplier < 1 || *r.Jitter < 0 || *r.Jitter > 1 {
			add("%s.retry: initial %v, max %v, multiplier %v, jitter %v: want 0 < initial <= max, multiplier >= 1 and jitter within 0..1",
				at, r.Initial.D(), r.Max.D(), r.Multiplier, *r.Jitter)
		}
		if s.MaxRate < 0 || s.MaxByteRate < 0 {
			add("%s: maxRate and maxByteRate must not be negative (0: no limit)", at)
		}
		validateFilter(s.Filter, at+".filter", add)
		if r := s.Retry; r.MaxDeliveries < 0 {
			add("%s.retry.maxDeliveries: %d must not be negative", at, r.MaxDeliveries)
		} else if r.MaxDeliveries > 0 && s.Type != "shared" && s.Type != "key_shared" {
			add("%s.retry.maxDeliveries: needs type shared or key_shared: Pulsar counts redeliveries on those subscriptions only", at)
		}
	}
	return p
}
