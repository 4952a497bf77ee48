package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Errors a Subscriber wraps (with %w) so the handler can answer with the right status.
var (
	// ErrBusy: the subscription already has the one consumer its type allows (409).
	ErrBusy = errors.New("the subscription is busy")
	// ErrUnavailable: the broker cannot be reached (503, Retry-After).
	ErrUnavailable = errors.New("broker unavailable")
	// ErrEndOfTopic: the topic was terminated and everything in it delivered: the stream
	// ends cleanly.
	ErrEndOfTopic = errors.New("end of topic")
	// ErrBadPosition: a seek's time or message id the subscription cannot be moved to
	// (an id of no partition of the topic, say) (400).
	ErrBadPosition = errors.New("bad position")
)

// SubscribeOptions say what to subscribe to.
type SubscribeOptions struct {
	Topics       []string
	Subscription string
	Type         string // exclusive, shared, failover, key_shared
	Position     string // earliest, latest: where a subscription that does not exist yet starts
	// StartTime or StartMessageID (ledger:entry:partition:batchIndex), when set, move the
	// subscription (new or not) there with SEEK once subscribed.
	StartTime      time.Time
	StartMessageID string
	ReceiverQueue  int
	// ReceiverQueueBytes bounds the consumer's queue per partition in payload bytes.
	ReceiverQueueBytes int64
	// MaxPendingChunkedMessages bounds the chunked messages reassembled at once per
	// partition (0: the client's default).
	MaxPendingChunkedMessages int
	// DeliverUndecodable: hand up the messages the consumer cannot decode, as stored
	// (Delivery.Undecodable), for the stream to dead-letter; otherwise the consumer
	// acknowledges them itself. Set for streams with a dead-letter topic.
	DeliverUndecodable bool
	// CryptoFailure is what becomes of an encrypted message: fail (the subscription's
	// Receive fails, naming it, and it stays unacknowledged), discard (acknowledged by
	// the consumer) or deliver (Delivery.Encryption says how it is encrypted).
	CryptoFailure string
	// TopicsPattern, instead of Topics: every persistent topic of one namespace whose
	// name matches (persistent://tenant/namespace/<regex>), followed as topics come and
	// go; NewTopicsPosition (earliest, latest) is where a subscription starts on a topic
	// matched later, and DiscoveryInterval how often the namespace is listed again.
	TopicsPattern     string
	NewTopicsPosition string
	DiscoveryInterval time.Duration
	// Stream names the stream, for the pattern's metrics.
	Stream string
}

// Delivery is one message handed to a stream.
type Delivery struct {
	ID           string // ledger:entry:partition:batchIndex
	Topic        string
	Key          string
	OrderingKey  []byte // Key_Shared's ordering key, when the producer set one
	Properties   map[string]string
	PublishTime  time.Time
	EventTime    time.Time
	Redeliveries uint32
	// SchemaVersion is the version of the topic's schema the message was produced with
	// (nil: none), for a Converter.
	SchemaVersion []byte
	// Payload is the message's bytes when they are in one piece; nil when Body is set.
	Payload []byte
	// Body streams a payload that is not held in one piece (a reassembled chunked
	// message), Size bytes, so it is written to the client without being joined in memory.
	Body   io.Reader
	Size   int64
	Handle any // the Subscription's own message, for Ack and Nack
	// Undecodable, when set, says why the consumer could not decode the message
	// (SubscribeOptions.DeliverUndecodable); Payload is then the entry as stored. It is
	// never written to a client: the stream dead-letters it, then acknowledges it.
	Undecodable error
	// Encryption describes a message delivered still encrypted (cryptoFailure: deliver).
	Encryption *Encryption
}

// Encryption is how a message delivered still encrypted was encrypted and stored: what
// a client holding the private key needs to decrypt it (as the Java client does: the
// data key is decrypted with the private key named, then the payload with the data key
// and Param, then it is decompressed and, with BatchSize, split into its messages).
type Encryption struct {
	Keys             []EncryptionKey `json:"keys"`
	Algorithm        string          `json:"algorithm,omitempty"`
	Param            []byte          `json:"param,omitempty"`
	Compression      string          `json:"compression"`
	UncompressedSize int             `json:"uncompressedSize"`
	BatchSize        int             `json:"batchSize,omitempty"` // num_messages_in_batch; absent: not a batch
	// Metadata is the message's MessageMetadata as stored (protobuf).
	Metadata []byte `json:"metadata"`
}

// EncryptionKey is the message's data key encrypted with the public key Name.
type EncryptionKey struct {
	Name     string            `json:"name"`
	Value    []byte            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Len is the payload's length in bytes.
func (d *Delivery) Len() int64 {
	if d.Body != nil {
		return d.Size
	}
	return int64(len(d.Payload))
}

// Subscription is one consumer on a subscription.
type Subscription interface {
	// Receive blocks for the next message, until ctx ends.
	Receive(ctx context.Context) (*Delivery, error)
	// TryReceive returns a message that is already buffered, if any.
	TryReceive() (*Delivery, bool)
	Ack(d *Delivery) error
	// Nack asks for the message to be delivered again, after the delay.
	Nack(d *Delivery, after time.Duration)
	// Close ends the consumer; what it delivered without an ack is redelivered.
	Close() error
}

// Converter turns a message stored as one record type into another, by the topic's
// schema of the message's version: a Subscriber that implements it lets a stream whose
// records are application/x-protobuf serve Message-Accept: application/json.
type Converter interface {
	// Converts reports whether records of type from can be converted to type to.
	Converts(from, to string) bool
	// Convert converts d's payload (whole) from type from to type to.
	Convert(ctx context.Context, d *Delivery, payload []byte, from, to string) ([]byte, error)
}

// Subscriber is what egress needs from a Pulsar client.
type Subscriber interface {
	Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error)
}

// Limits bound egress streams.
type Limits struct {
	MaxStreams   int
	WriteTimeout time.Duration
}

// Server serves egress streams and their acknowledgement endpoints.
type Server struct {
	sub   Subscriber
	log   *slog.Logger
	tr    *telemetry.Tracing
	obs   Observer
	state atomic.Pointer[state]

	gate    admission.Gate
	mu      sync.Mutex
	open    map[string]*stream // by Stream-Id
	stop    context.Context    // cancelled by Drain: streams end
	stopAll context.CancelFunc
}

type state struct {
	table  *mapping.Table
	auth   *admission.Tokens
	limits Limits
}

// Observer receives the facts egress metrics are made of; nil is allowed.
type Observer interface {
	EgressStreamStarted(stream string)
	EgressStreamEnded(stream string)
	// RecordsWritten counts records flushed to a client, with the lag of the newest:
	// the time from its publication to its delivery.
	RecordsWritten(stream string, n, bytes int64, lag time.Duration)
	// Acked counts acknowledgements, with the time from delivery to acknowledgement for
	// ack=client (0 for ack=auto).
	Acked(stream string, n int64, latency time.Duration)
}

// RetryObserver, when the Observer implements it too, receives the facts of
// redeliveries: negative acknowledgements and acknowledgement timeouts.
type RetryObserver interface {
	// Nacked counts messages sent back for redelivery, by cause ("nack" or
	// "ack_timeout"), and by attempt: how many times each had been delivered.
	Nacked(stream, cause string, deliveries uint32)
	// DeadLettered counts messages moved to the dead-letter topic (ok) or that could
	// not be (!ok: they stay unacknowledged and are redelivered).
	DeadLettered(stream string, ok bool)
}

// RateObserver, when the Observer implements it too, receives the time rate-limited
// streams waited before writing a record (maxRate, maxByteRate).
type RateObserver interface {
	RateLimited(stream string, waited time.Duration)
}

// DeadLetterer is what a Subscription implements to move a message to a dead-letter
// topic: it publishes the message's payload, key and properties, with the origin topic
// and message id added (REAL_TOPIC, ORIGIN_MESSAGE_ID: the names Pulsar's Java client
// uses), and returns once the broker persisted it.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d *Delivery, topic string) error
}

// Releaser is what a Subscription implements when it holds something per delivery until
// the delivery is settled (the bridge's memory budget charge): Release settles d without
// telling the broker. An ack=client stream calls it for a delivery superseded by a
// redelivery of the same message before the client answered (the broker sends again
// what a consumer that reconnected had not acknowledged): the new delivery is the one
// the client's ack, nack or ack timeout settles, so without Release the old one would
// be held until the stream ends.
type Releaser interface {
	Release(d *Delivery)
}

// PayloadCopier is what a Subscription implements when it can reuse what a delivery's
// payload points into once nothing reads it: a stream calls Copied once it has written
// d's record (copied into the response's buffer, or through to the connection), or its
// filter left d out, and reads d.Payload and d.Body no more. The Subscription may reuse the bytes only once d
// is settled too (acknowledged, negatively acknowledged or released), and never after
// a dead-lettering read them.
type PayloadCopier interface {
	Copied(d *Delivery)
}

// The bridge's metrics count redeliveries and dead letters.
var _ RetryObserver = (*telemetry.Metrics)(nil)
var _ RateObserver = (*telemetry.Metrics)(nil)

type nopObserver struct{}

func (nopObserver) EgressStreamStarted(string)                         {}
func (nopObserver) EgressStreamEnded(string)                           {}
func (nopObserver) RecordsWritten(string, int64, int64, time.Duration) {}
func (nopObserver) Acked(string, int64, time.Duration)                 {}

// New returns a Server subscribing through sub; obs and tr may be nil.
func New(sub Subscriber, log *slog.Logger, obs Observer, tr *telemetry.Tracing) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if obs == nil {
		obs = nopObserver{}
	}
	if tr == nil {
		tr = telemetry.Disabled()
	}
	stop, stopAll := context.WithCancel(context.Background())
	return &Server{sub: sub, log: log, obs: obs, tr: tr, open: map[string]*stream{}, stop: stop, stopAll: stopAll}
}

// Update installs stream definitions, the tokens requests are checked against (nil:
// none required) and limits for the streams opened from now on.
func (s *Server) Update(t *mapping.Table, auth *admission.Tokens, l Limits) {
	s.state.Store(&state{table: t, auth: auth, limits: l})
}

// Active reports how many streams are open.
func (s *Server) Active() int { return s.gate.Active() }

// IsAck reports whether path is the acknowledgement endpoint of a configured stream.
func (s *Server) IsAck(path string) bool {
	st := s.state.Load()
	if st == nil {
		return false
	}
	_, ack, ok := st.table.LookupStream(path)
	return ok && ack
}

// Drain ends every stream (each flushes, acknowledges what it wrote and closes its
// consumer) and refuses new ones; it waits until they are gone or ctx ends.
func (s *Server) Drain(ctx context.Context) error {
	if s.gate.Drain() {
		s.stopAll()
	}
	return s.gate.Wait(ctx)
}

// Handle serves GET <stream path>.
//
// An idle stream's handler waits in its consumer's Receive for as long as the stream is
// open, and the runtime halves a parked goroutine's stack at a collection only when less
// than a quarter of it is in use: so what stays on the stack below that wait is kept
// small. Everything that sets a stream up (authentication, the query, negotiation,
// subscribing: most of a kilobyte and a half of frame) is in start, which has returned
// by then, and the handler's stack comes down from 16 to 8 KiB.
func (s *Server) Handle(c echo.Context) error {
	sm, leave, err := s.start(c)
	if sm == nil {
		return err
	}
	defer leave()
	defer sm.span.End()
	s.serve(sm)
	return nil
}

// serve runs an opened stream until it ends, listed among the open ones meanwhile.
func (s *Server) serve(sm *stream) {
	s.mu.Lock()
	s.open[sm.id] = sm
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.open, sm.id)
		s.mu.Unlock()
	}()
	s.obs.EgressStreamStarted(sm.def.Name)
	written := sm.run()
	s.obs.EgressStreamEnded(sm.def.Name)
	endSpan(sm.span, written)
}

// endSpan records a stream's outcome on its span. Not inlined: its attributes would
// take room in serve's frame, which is on the stack while the stream waits.
//
//go:noinline
func endSpan(span trace.Span, written int64) {
	span.SetAttributes(telemetry.AttrHTTPStatusCode(http.StatusOK), attribute.Int64("bridge.records", written))
}

// start checks a GET of a stream and subscribes for it. It returns the stream with its
// span started and the function that gives its place among egress.maxStreams back, or,
// when it answered the request itself, a nil stream and what Handle returns.
func (s *Server) start(c echo.Context) (*stream, func(), error) {
	req := c.Request()
	st := s.state.Load()
	if st == nil {
		return nil, nil, httpreply.Error(c, http.StatusServiceUnavailable, "no configuration loaded yet", 1)
	}
	caller, err := admission.Authenticate(st.auth, req.Header)
	if err != nil {
		return nil, nil, deny(c, err)
	}
	def, isAck, ok := st.table.LookupStream(req.URL.Path)
	if !ok || isAck {
		if isAck && strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/ack") {
			if err := caller.Authorize(admission.Read, def.Name); err != nil {
				return nil, nil, deny(c, err)
			}
			return nil, nil, s.lookup(c, def)
		}
		if isAck && strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/seek") {
			return nil, nil, httpreply.Error(c, http.StatusMethodNotAllowed, "move a stream with POST "+req.URL.Path, 0)
		}
		if isAck {
			return nil, nil, httpreply.Error(c, http.StatusMethodNotAllowed, "acknowledge with POST "+req.URL.Path, 0)
		}
		return nil, nil, httpreply.Error(c, http.StatusNotFound, "no stream at "+strconv.Quote(req.URL.Path), 0)
	}
	if err := caller.Authorize(admission.Read, def.Name); err != nil {
		return nil, nil, deny(c, err)
	}
	opts, err := resolveQuery(def, req)
	if err != nil {
		return nil, nil, httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	pos, err := config.ParsePosition(opts.position)
	if err == nil && pos.ID != "" && len(def.Topics) > 1 {
		err = fmt.Errorf("position=%q names no topic and stream %s reads %d; an id position needs a stream of one topic (POST %s/seek with a topic moves one)",
			opts.position, def.Name, len(def.Topics), def.Path)
	}
	if err != nil {
		return nil, nil, httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	if pos.Seeks() {
		if msg := seekRefused(def); msg != "" {
			return nil, nil, httpreply.Error(c, http.StatusConflict, fmt.Sprintf("position=%s: %s", opts.position, msg), 0)
		}
	}
	if !httpreply.DropBody(c) {
		// Checked before subscribing: the stream's answer never waits for a body.
		return nil, nil, httpreply.Error(c, http.StatusBadRequest, "a GET of a stream has no body; this one did not end", 0)
	}
	recordType := def.ContentType
	if opts.envelope == "json" {
		recordType = recordio.MediaJSON
	}
	offered := []string{recordType}
	conv, _ := s.sub.(Converter)
	if opts.envelope != "json" && conv != nil && conv.Converts(recordType, recordio.MediaJSON) {
		offered = append(offered, recordio.MediaJSON) // converted by the topic's schema
	}
	resp, err := recordio.NegotiateResponse(req.Header.Get("Accept"), req.Header.Get("Message-Accept"), offered, nil)
	if err != nil || !resp.Streaming {
		msg := "send Accept: application/recordio"
		var me *recordio.MediaError
		if errors.As(err, &me) && me.Header == "Message-Accept" && strings.HasPrefix(me.Detail, "offered") {
			msg = fmt.Sprintf("Message-Accept %q: the stream's records are %s and cannot be converted to that (served as: %s)",
				me.Value, recordType, strings.Join(offered, ", "))
		} else if err != nil {
			msg = err.Error()
		}
		return nil, nil, httpreply.Error(c, http.StatusNotAcceptable, msg, 0)
	}
	leave, err := s.gate.Enter(st.limits.MaxStreams)
	if err != nil {
		if errors.Is(err, admission.ErrDraining) {
			return nil, nil, httpreply.Error(c, http.StatusServiceUnavailable, err.Error(), 5)
		}
		return nil, nil, httpreply.Error(c, http.StatusTooManyRequests, fmt.Sprintf("%v (egress.maxStreams is %d)", err, st.limits.MaxStreams), 1)
	}

	// The response span continues the client's trace; each message's process span links to it.
	ctx := s.tr.Propagator.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, span := s.tr.Tracer.Start(ctx, "GET "+def.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.AttrHTTPMethod.String(http.MethodGet), telemetry.AttrHTTPRoute(def.Path),
			telemetry.AttrSystemPulsar, telemetry.AttrConsumerGroup(opts.subscription)))
	var pattern string
	if def.TopicsPattern != nil {
		pattern = def.TopicsPattern.String()
	}
	sub, err := s.sub.Subscribe(ctx, SubscribeOptions{Topics: def.Topics, TopicsPattern: pattern, Stream: def.Name,
		NewTopicsPosition: def.NewTopicsPosition, DiscoveryInterval: def.DiscoveryInterval, Subscription: opts.subscription, Type: def.Type,
		Position: pos.Initial, StartTime: pos.Time, StartMessageID: pos.ID, ReceiverQueue: def.ReceiverQueue, ReceiverQueueBytes: def.ReceiverQueueBytes,
		MaxPendingChunkedMessages: def.MaxPendingChunkedMessages, DeliverUndecodable: def.DeadLetters(), CryptoFailure: def.CryptoFailure})
	if err != nil {
		// Answered with the place and the span still held, as a stream that ends.
		defer leave()
		defer span.End()
		switch {
		case errors.Is(err, ErrBusy):
			return nil, nil, httpreply.Error(c, http.StatusConflict, err.Error(), 0)
		case errors.Is(err, ErrBadPosition):
			return nil, nil, httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
		case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			return nil, nil, httpreply.Error(c, http.StatusServiceUnavailable, err.Error(), 5)
		}
		return nil, nil, httpreply.Error(c, http.StatusBadGateway, err.Error(), 0)
	}
	sm := newStream(s, c, ctx, def, opts, sub, resp.RecordType, st.limits)
	sm.span = span
	if resp.RecordType != recordType {
		sm.conv, sm.storedType = conv, recordType
	}
	return sm, leave, nil
}

func newStreamID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// deny answers an authorization error: 403 when the token does not grant the access,
// 503 when the token could not be judged (its issuer's keys cannot be had: the bridge's
// problem, logged by admission with the details, none of which is in the answer), 401
// (with the challenge) when there is no valid token.
func deny(c echo.Context, err error) error {
	if errors.Is(err, admission.ErrForbidden) {
		return httpreply.Error(c, http.StatusForbidden, err.Error(), 0)
	}
	if errors.Is(err, admission.ErrIdentityProviderUnavailable) {
		return httpreply.Error(c, http.StatusServiceUnavailable, admission.UnavailableMessage, 5)
	}
	return httpreply.Challenge(c, http.StatusUnauthorized, err.Error(), admission.Challenge(err))
}

// lookup serves GET <stream path>/ack?positions=0,1,…: for records awaiting their
// acknowledgement, their message id and redelivery count, so a client reading bare
// payloads (envelope=none) learns how often a record was delivered before.
func (s *Server) lookup(c echo.Context, def *mapping.Stream) error {
	sid := c.Request().Header.Get("Stream-Id")
	s.mu.Lock()
	sm := s.open[sid]
	s.mu.Unlock()
	if sm == nil {
		return httpreply.Error(c, http.StatusConflict, notOpenHere(def.Name, sid), 0)
	}
	if sm.def.Name != def.Name {
		return httpreply.Error(c, http.StatusNotFound, fmt.Sprintf("no open stream %s with Stream-Id %q", def.Name, sid), 0)
	}
	raw := c.QueryParam("positions")
	if raw == "" || strings.Count(raw, ",") >= 1000 { // counted before anything is allocated
		return httpreply.Error(c, http.StatusBadRequest, "send positions=0,1,… (at most 1000)", 0)
	}
	parts := strings.Split(raw, ",")
	type record struct {
		Position        int64  `json:"position"`
		MessageID       string `json:"messageId"`
		RedeliveryCount uint32 `json:"redeliveryCount"`
	}
	out := make([]record, 0, len(parts))
	unknown := []string{} // an array also when every position is known, as the contract says
	sm.mu.Lock()
	for _, p := range parts {
		pos, err := strconv.ParseInt(p, 10, 64)
		id, ok := sm.byPos[pos]
		if err != nil || !ok {
			unknown = append(unknown, p)
			continue
		}
		out = append(out, record{Position: pos, MessageID: id, RedeliveryCount: sm.unacked[id].d.Redeliveries})
	}
	sm.mu.Unlock()
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "records": out, "unknown": unknown})
}
