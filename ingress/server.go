package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/httpreply"
	"github.com/recordio-bridge/bridge/internal/schema"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Errors a Publisher wraps (with %w) so the handler can answer with the right status.
var (
	// ErrUnavailable: the broker could not persist the message in time (503, Retry-After).
	ErrUnavailable = errors.New("broker unavailable")
	// ErrTooLarge: the message is larger than the broker or the publisher accepts (413).
	ErrTooLarge = errors.New("message too large")
	// ErrRefused: the broker refused the message for good (for example no permission) (502).
	ErrRefused = errors.New("message refused by the broker")
)

// Message is one record on its way to a topic.
type Message struct {
	Topic      string
	Key        string
	Properties map[string]string
	Payload    []byte // nil for PublishStream
	// Producer and Sequence are set for a named stream's record (NamedPublisher): the
	// producer name and the record's sequence number; Producer is "" otherwise.
	Producer string
	Sequence int64
	// ExtraKey and ExtraValue, when ExtraKey is set, are one more property, replacing a
	// pair of Properties with that key, its value as bytes the publisher reads before
	// PublishAsync or PublishStream returns: the record's trace context, set per record
	// without a map.
	ExtraKey   string
	ExtraValue []byte
	// Schema is what the topic's producer declares (nil: none); records of one topic
	// with different schemas go through different producers.
	Schema *schema.Schema
}

// RecordOverhead is what a record awaiting its receipt holds whatever its size: its
// place in its stream's queue and its receipt's state (about 500 bytes, measured with
// records held unanswered), and its message's in its producer. Counted in each record's
// charge, so that ingress.pendingBytes and memory.budget bound the memory of small
// records too: a stream of 2-byte records held 2 MiB at ingress.pendingRecords 4096
// while the budget saw 8 KiB of it, 2 GiB with 1 000 such streams.
const RecordOverhead = 512

// MetadataBytes is what the message holds in memory besides its payload while it awaits
// its receipt, as ingress.pendingBytes and memory.budget count it: its key and
// properties (every message, and every chunk of a chunked one, carries them, so a route
// that copies a large request header into each record's properties makes each record
// that much larger), and RecordOverhead.
func (m *Message) MetadataBytes() int64 {
	n := int64(RecordOverhead + len(m.Key) + len(m.Producer))
	for k, v := range m.Properties {
		n += int64(len(k) + len(v))
	}
	if m.ExtraKey != "" {
		n += int64(len(m.ExtraKey) + len(m.ExtraValue))
	}
	return n
}

// Publisher is what ingress needs from a Pulsar producer pool.
type Publisher interface {
	// PublishAsync queues m and returns; done runs once the broker persisted it (with
	// the message id) or it failed. It blocks while the topic's queue is full, until ctx
	// ends. m, its payload and its properties map may be reused once it returns.
	PublishAsync(ctx context.Context, m *Message, done func(id string, err error))
	// PublishStream publishes size bytes read from r as one (chunked) message and
	// returns once it is persisted.
	PublishStream(ctx context.Context, m *Message, size int64, r io.Reader) (string, error)
}

// Limits bound what a stream may hold and how long it may stay silent.
type Limits struct {
	MaxRecordBytes    int64         // larger records fail with 413
	BufferRecordBytes int64         // larger records are streamed into chunked messages
	MaxStreams        int           // concurrent requests; more get 429
	IdleTimeout       time.Duration // a body silent this long ends the stream (408)
	PendingRecords    int           // records awaiting receipts per stream
	PendingBytes      int64         // bytes awaiting receipts per stream
}

// Observer receives the facts metrics are made of; every method must be cheap and safe
// for concurrent use. A nil Observer is allowed.
type Observer interface {
	StreamStarted(route string)
	StreamEnded(route string, status int)
	// RecordsSettled counts n records (of bytes in all) settled with status; a stream
	// reports them in aggregate, whenever it flushes its receipts.
	RecordsSettled(route string, status int, n, bytes int64)
	// PublishLatency is the time from reading a record to the broker's receipt, for a
	// sample of records: every 8th, and every record that arrives when the stream is idle;
	// sc is the record's publish span (an exemplar when sampled; invalid with tracing off).
	PublishLatency(route string, d time.Duration, sc trace.SpanContext)
	// PublishStage is the time the same sample of records spent in one stage between the
	// body read that completed the record and its receipt written to the client: read
	// (decoding, routing, room in ingress.pendingBytes), queue (handing it to the
	// producer), send (from there to the broker's receipt: waiting to share an entry, the
	// socket, the broker, the callback), order (behind earlier records' receipts, and the
	// collector's wake-up), write (its receipt to the client).
	PublishStage(route, stage string, d time.Duration)
	DecodeError(route string)
}

// Server serves the ingress endpoints. Update installs routes and limits; it may be
// called at any time (a reload) and applies from each stream's next record.
type Server struct {
	pub   Publisher
	log   *slog.Logger
	obs   Observer
	tr    *telemetry.Tracing
	state atomic.Pointer[state]

	gate admission.Gate
	mu   sync.Mutex
	open map[*stream]struct{}
}

type state struct {
	table  *mapping.Table
	auth   *admission.Tokens
	limits Limits
}

// New returns a Server publishing through pub; obs and tr may be nil (no metrics, no
// tracing).
func New(pub Publisher, log *slog.Logger, obs Observer, tr *telemetry.Tracing) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if obs == nil {
		obs = nopObserver{}
	}
	if tr == nil {
		tr = telemetry.Disabled()
	}
	return &Server{pub: pub, log: log, obs: obs, tr: tr, open: map[*stream]struct{}{}}
}

// Update installs a routing table, the tokens requests are checked against (nil: none
// required) and limits for the records that arrive from now on.
func (s *Server) Update(t *mapping.Table, auth *admission.Tokens, l Limits) {
	s.state.Store(&state{table: t, auth: auth, limits: l})
}

// Register adds the ingress handler to e for every POST. (bridge run dispatches POSTs
// itself, since egress acknowledgements are POSTs too.)
func (s *Server) Register(e *echo.Echo) {
	e.POST("/*", s.Handle)
}

// Active reports how many streams are open.
func (s *Server) Active() int { return s.gate.Active() }

// Drain stops new streams (503), stops reading the bodies of open ones, and waits until
// every open stream has written its summary or ctx ends; records still unsettled then
// are answered as failed (their outcome unknown).
func (s *Server) Drain(ctx context.Context) error {
	s.gate.Drain()
	// A stream admitted before the drain is either in open now, or sees the drain when
	// it registers (both under s.mu).
	s.mu.Lock()
	for st := range s.open {
		st.stopReading(errDraining)
	}
	s.mu.Unlock()
	// The drain's last moments (half of it, at most a second) are for the summaries:
	// records still unsettled then are answered "outcome unknown" and every write to a
	// client is cut at the deadline, so Drain returns by its deadline whatever the
	// clients do.
	cut, hasDeadline := ctx.Deadline()
	actx := ctx
	if hasDeadline {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(ctx, cut.Add(-min(abandonGrace, time.Until(cut)/2)))
		defer cancel()
	}
	if err := s.gate.Wait(actx); err == nil {
		return nil
	}
	if !hasDeadline {
		cut = time.Now().Add(abandonGrace)
	}
	s.mu.Lock()
	for st := range s.open {
		st.abandon(cut)
	}
	s.mu.Unlock()
	wctx, cancel := context.WithDeadline(context.Background(), cut)
	defer cancel()
	_ = s.gate.Wait(wctx)
	return context.DeadlineExceeded
}

// abandonGrace is the end of a drain left for the streams' summaries.
const abandonGrace = time.Second

var errDraining = admission.ErrDraining

// Handle is the echo handler of every ingress route.
func (s *Server) Handle(c echo.Context) error {
	sm, span, done, err := s.start(c)
	if sm == nil {
		return err
	}
	defer done()
	defer span.End()
	return s.serve(sm, span)
}

// serve runs an opened stream until it ends, listed among the open ones meanwhile,
// unless the server began draining as it opened.
func (s *Server) serve(sm *stream, span trace.Span) error {
	if !s.register(sm) {
		return refuse(sm.c, errDraining, "", 0)
	}
	defer s.unregister(sm)
	status := sm.run()
	s.obs.StreamEnded(sm.route, status)
	endSpan(span, sm, status)
	return nil
}

// register lists sm among the open streams, unless the server is draining.
func (s *Server) register(sm *stream) bool {
	s.mu.Lock()
	if s.gate.Draining() {
		s.mu.Unlock()
		return false
	}
	s.open[sm] = struct{}{}
	s.mu.Unlock()
	s.obs.StreamStarted(sm.route)
	return true
}

// unregister takes an ended stream off the open ones.
func (s *Server) unregister(sm *stream) {
	s.mu.Lock()
	delete(s.open, sm)
	s.mu.Unlock()
}

// endSpan records a stream's outcome on its span. Not inlined: its attributes would
// take room in serve's frame, which is on the stack while the stream waits.
//
//go:noinline
func endSpan(span trace.Span, sm *stream, status int) {
	span.SetAttributes(telemetry.AttrHTTPStatusCode(status), attribute.Int64("bridge.records", sm.accepted),
		attribute.Int64("bridge.published", sm.published))
	if status != http.StatusOK {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// start checks a POST and sets its stream up. It returns the stream with its span
// started and what gives back its place among ingress.maxStreams (and its named
// stream's claim), or, when it answered the request itself, a nil stream and what
// Handle returns.
func (s *Server) start(c echo.Context) (*stream, trace.Span, func(), error) {
	req := c.Request()
	st := s.state.Load()
	if st == nil {
		return nil, nil, nil, httpreply.Error(c, http.StatusServiceUnavailable, "no configuration loaded yet", 1)
	}
	// Unauthenticated callers learn nothing, not even whether the route exists.
	caller, err := admission.Authenticate(st.auth, req.Header)
	if err != nil {
		return nil, nil, nil, deny(c, err)
	}
	route, params, ok := st.table.Lookup(req.URL.Path)
	if !ok {
		return nil, nil, nil, httpreply.Error(c, http.StatusNotFound, "no route for "+strconv.Quote(req.URL.Path), 0)
	}
	if err := caller.Authorize(admission.Write, route.Name()); err != nil {
		return nil, nil, nil, deny(c, err)
	}
	for _, name := range []string{"Content-Type", "Message-Content-Type"} {
		if n := len(req.Header.Values(name)); n > 1 {
			return nil, nil, nil, httpreply.Error(c, http.StatusBadRequest, fmt.Sprintf("%s given %d times: send it once", name, n), 0)
		}
	}
	format, err := recordio.ParseRequest(req.Header.Get("Content-Type"), req.Header.Get("Message-Content-Type"), route.ContentTypes())
	if err != nil {
		status := http.StatusUnsupportedMediaType
		if errors.Is(err, recordio.ErrNoContentType) || errors.Is(err, recordio.ErrMissingMessageContentType) {
			status = http.StatusBadRequest
		}
		return nil, nil, nil, httpreply.Error(c, status, err.Error(), 0)
	}
	named, err := parseNamedStream(req.Header, route.Name())
	if err != nil {
		return nil, nil, nil, httpreply.Error(c, http.StatusBadRequest, err.Error(), 0)
	}
	leave, err := s.gate.Enter(st.limits.MaxStreams)
	if err != nil {
		return nil, nil, nil, refuse(c, err, "ingress.maxStreams", st.limits.MaxStreams)
	}
	resp, nerr := recordio.NegotiateResponse(req.Header.Get("Accept"), req.Header.Get("Message-Accept"),
		[]string{recordio.MediaJSON}, []string{recordio.MediaJSON})
	if me := (*recordio.MediaError)(nil); errors.As(nerr, &me) && me.Header == "Message-Accept" {
		// The client named the receipts' type and ingress cannot write it: refused
		// before anything is published. (Any other Accept gets the one JSON answer.)
		leave()
		return nil, nil, nil, httpreply.Error(c, http.StatusNotAcceptable, nerr.Error(), 0)
	}
	streaming := nerr == nil && resp.Streaming
	done := leave
	if named != nil {
		release, status, err := s.claim(named)
		if err != nil {
			leave()
			return nil, nil, nil, httpreply.Error(c, status, err.Error(), 0)
		}
		done = func() {
			release()
			leave()
		}
	}

	// The stream's server span continues the client's trace (W3C traceparent/tracestate).
	ctx := s.tr.Propagator.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, span := s.tr.Tracer.Start(ctx, "POST "+route.Name(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.AttrHTTPMethod.String(http.MethodPost), telemetry.AttrHTTPRoute(req.URL.Path)))
	sm := newStream(s, c, ctx, route.Name(), route.NewRequest(format.RecordType, req.Header, params), st.limits, streaming, format.Streaming)
	sm.named = named
	return sm, span, done, nil
}

type nopObserver struct{}

func (nopObserver) StreamStarted(string)                                    {}
func (nopObserver) StreamEnded(string, int)                                 {}
func (nopObserver) RecordsSettled(string, int, int64, int64)                {}
func (nopObserver) PublishLatency(string, time.Duration, trace.SpanContext) {}
func (nopObserver) PublishStage(string, string, time.Duration)              {}
func (nopObserver) DecodeError(string)                                      {}

// refuse answers a stream the gate did not admit: 503 while draining, 429 over the limit
// (named by key).
func refuse(c echo.Context, err error, key string, limit int) error {
	if errors.Is(err, admission.ErrDraining) {
		return httpreply.Error(c, http.StatusServiceUnavailable, err.Error(), 5)
	}
	return httpreply.Error(c, http.StatusTooManyRequests, fmt.Sprintf("%v (%s is %d)", err, key, limit), 1)
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
