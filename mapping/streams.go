package mapping

import (
	"fmt"
	"github.com/recordio-bridge/bridge/internal/backoff"
	"mime"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar"
)

// Stream is a compiled egress stream definition. It is immutable.
type Stream struct {
	Name               string
	Path               string
	Topics             []string // normalised
	Subscription       string
	Type               string // exclusive, shared, failover, key_shared
	Position           string // earliest, latest, an RFC 3339 time or id:L:E:P:B (see config.ParsePosition)
	AllowSeekShared    bool   // a seek may move a shared, key_shared or failover subscription
	ContentType        string
	Ack                string // auto, client
	Envelope           string // none, json
	Overrides          []string
	HeartbeatInterval  time.Duration
	Heartbeat          []byte
	ReceiverQueue      int
	ReceiverQueueBytes int64 // per partition
	// MaxPendingChunkedMessages: chunked messages reassembled at once per partition.
	MaxPendingChunkedMessages int
	AckTimeout                time.Duration
	MaxUnacked                int
	Retry                     Retry
	MaxRate                   float64 // records/s; 0: no limit
	MaxByteRate               int64   // payload bytes/s; 0: no limit
	CryptoFailure             string  // fail, discard, deliver
	// Filter, when set, keeps the messages it matches; the others are acknowledged unseen.
	Filter *Filter
	// AckReceipt (ack=client): /ack waits for the broker's confirmation of each acknowledgement.
	AckReceipt bool
	// TopicsPattern, instead of Topics: the topics of one namespace whose names match.
	TopicsPattern *pulsar.TopicsPattern
	// NewTopicsPosition is where a subscription starts on a topic the pattern matched
	// after the stream started: earliest or latest.
	NewTopicsPosition string
	// DiscoveryInterval is how often the pattern's namespace is listed again.
	DiscoveryInterval time.Duration
}

// Retry is a stream's redelivery backoff (see config.Retry).
type Retry struct {
	Initial    time.Duration
	Multiplier float64
	Jitter     float64
	Max        time.Duration
	// MaxDeliveries > 0: a message delivered that many times is dead-lettered.
	MaxDeliveries int
	// DeadLetterTopic, normalised; "" for <topic>-<subscription>-DLQ.
	DeadLetterTopic string
}

// Delay is how long a message waits before its next delivery after failing with
// redeliveries earlier redeliveries: Initial × Multiplier^redeliveries spread by
// ±Jitter, never more than Max (see backoff.Schedule); u, in [0,1), picks the point in
// the spread.
func (r Retry) Delay(redeliveries uint32, u float64) time.Duration {
	return backoff.Schedule{Initial: r.Initial, Multiplier: r.Multiplier, Jitter: r.Jitter, Max: r.Max}.Delay(int(min(redeliveries, 64)), u)
}

// DeadLetters reports whether the stream has a dead-letter topic: retry.deadLetterTopic
// is set, or retry.maxDeliveries is (which uses the <topic>-<subscription>-DLQ convention).
func (s *Stream) DeadLetters() bool {
	return s.Retry.DeadLetterTopic != "" || s.Retry.MaxDeliveries > 0
}

// Allows reports whether a client may override the query parameter name.
func (s *Stream) Allows(name string) bool { return slices.Contains(s.Overrides, name) }

func compileStreams(cfg config.Config) ([]*Stream, config.Problems) {
	var out []*Stream
	var p config.Problems
	type reader struct {
		name   string
		filter *config.Filter
	}
	readers := map[[2]string]reader{} // subscription, topic -> the first stream reading it
	for i, raw := range cfg.Streams {
		at := fmt.Sprintf("streams[%d]", i)
		s := raw.WithDefaults()
		cs := &Stream{Name: s.Name, Path: "/" + strings.Trim(s.Path, "/"), Subscription: s.Subscription, Type: s.Type,
			Position: s.Position, AllowSeekShared: s.AllowSeekShared, Ack: s.Ack, Envelope: s.Envelope, Overrides: s.Overrides,
			HeartbeatInterval: s.HeartbeatInterval.D(), Heartbeat: []byte(s.Heartbeat), ReceiverQueue: s.ReceiverQueue,
			ReceiverQueueBytes: int64(s.ReceiverQueueBytes), MaxPendingChunkedMessages: s.MaxPendingChunkedMessages,
			AckTimeout: s.AckTimeout.D(), MaxUnacked: s.MaxUnacked,
			Retry: Retry{Initial: s.Retry.Initial.D(), Multiplier: s.Retry.Multiplier, Jitter: *s.Retry.Jitter, Max: s.Retry.Max.D(),
				MaxDeliveries: s.Retry.MaxDeliveries},
			MaxRate: s.MaxRate, MaxByteRate: s.MaxByteRate, CryptoFailure: s.CryptoFailure, AckReceipt: *s.AckReceipt,
			NewTopicsPosition: s.NewTopicsPosition, DiscoveryInterval: s.DiscoveryInterval.D()}
		cs.Filter = compileFilter(s.Filter, at+".filter", &p)
		if s.TopicsPattern != "" {
			pat, err := pulsar.ParseTopicsPattern(s.TopicsPattern)
			if err != nil {
				p.Addf("%s.topicsPattern: %v", at, err)
			}
			cs.TopicsPattern = pat
		}
		if s.Retry.DeadLetterTopic != "" {
			topic, err := NormalizeTopic(s.Retry.DeadLetterTopic)
			if err != nil {
				p.Addf("%s.retry.deadLetterTopic: %v", at, err)
			}
			cs.Retry.DeadLetterTopic = topic
			if cs.TopicsPattern != nil && err == nil && cs.TopicsPattern.Matches(topic) {
				p.Addf("%s.retry.deadLetterTopic: %s matches topicsPattern %s: the stream would read its own dead letters", at, topic, cs.TopicsPattern)
			}
		}
		mt, _, err := mime.ParseMediaType(s.ContentType)
		if err != nil {
			p.Addf("%s.contentType: %q is not a media type", at, s.ContentType)
		}
		cs.ContentType = mt
		for j, t := range s.Topics {
			topic, err := NormalizeTopic(t)
			if err != nil {
				p.Addf("%s.topics[%d]: %v", at, j, err)
				continue
			}
			cs.Topics = append(cs.Topics, topic)
			// Streams on one subscription split its messages: with different filters,
			// each would acknowledge unseen what the other keeps.
			key := [2]string{s.Subscription, topic}
			if r, seen := readers[key]; !seen {
				readers[key] = reader{s.Name, s.Filter}
			} else if !reflect.DeepEqual(r.filter, s.Filter) {
				p.Addf("%s: stream %s reads subscription %q of %s as stream %s does, with another filter: each would acknowledge "+
					"unseen the messages the other keeps; give them the same filter, or each its own subscription", at, s.Name, s.Subscription, topic, r.name)
			}
		}
		out = append(out, cs)
	}
	return out, p
}

// Streams lists the egress streams in configuration order.
func (t *Table) Streams() []*Stream { return t.streams }

// LookupStream returns the stream served at path, and whether path is one of its
// endpoints (<path>/ack, <path>/nack or <path>/seek).
func (t *Table) LookupStream(path string) (s *Stream, ack bool, ok bool) {
	path = "/" + strings.Trim(path, "/")
	for _, s := range t.streams {
		switch path {
		case s.Path:
			return s, false, true
		case s.Path + "/ack", s.Path + "/nack", s.Path + "/seek":
			return s, true, true
		}
	}
	return nil, false, false
}
