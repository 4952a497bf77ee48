package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// AckMode is how a stream's messages are acknowledged (the ack query parameter).
type AckMode string

const (
	// AckStream leaves the choice to the stream's configuration (no ack parameter).
	AckStream AckMode = ""
	// AckAuto: the bridge acknowledges a message once its record is flushed to the
	// connection; what a client dies holding is lost to it.
	AckAuto AckMode = "auto"
	// AckClient: the client acknowledges each message (Ack), or asks for it again (Nack);
	// what it does not acknowledge is delivered again.
	AckClient AckMode = "client"
)

// SubscriberOptions configure a Subscriber. URL is required. Subscription, Position, Ack
// and Envelope are sent as query parameters when set, and the stream must list them in
// its overrides (the bridge answers 400 otherwise).
type SubscriberOptions struct {
	// URL is the stream's URL, e.g. http://127.0.0.1:8080/v1/streams/tasks.
	URL          string
	Subscription string
	Position     string // e.g. earliest, latest, as the stream allows
	Ack          AckMode
	Envelope     string // json or none; with json each Message has its ID and RedeliveryCount
	// StreamEnvelope says the stream's own configuration has envelope: json (nothing is
	// sent): each Message has its ID and RedeliveryCount, as with Envelope json.
	StreamEnvelope bool
	// MessageAccept asks for the records in this type (Message-Accept), e.g.
	// application/json for a protobuf stream.
	MessageAccept string
	// MaxRecordSize is the largest record read (default 64 MiB); a larger one ends the
	// response, and the Subscriber reconnects.
	MaxRecordSize int
	// OnReconnect is called before each wait to reconnect, with why the last response
	// ended (or the request failed) and the wait. Nil: nothing is called.
	OnReconnect func(cause error, wait time.Duration)
	// Backoff is the wait between reconnects (zero fields: DefaultBackoff's); a
	// Retry-After from the bridge is waited out at least.
	Backoff Backoff
	// HTTPClient sends the requests; it must not set a Timeout. Nil: a client of its own.
	HTTPClient *http.Client
	// TLSConfig is used for https URLs when HTTPClient is nil.
	TLSConfig *tls.Config
	// Token gives the bearer token sent with each request; nil sends none.
	Token TokenSource
	// Header is added to every request.
	Header http.Header
}

// Message is one record of a stream.
type Message struct {
	// Data is the record as the bridge wrote it (with Envelope json, the envelope). It
	// belongs to the caller.
	Data []byte
	// ID is the message id ("ledger:entry:partition:batchIndex") from the JSON envelope;
	// empty without one, or for a heartbeat record.
	ID string
	// RedeliveryCount is the envelope's redeliveryCount (0 without the envelope).
	RedeliveryCount int
	// Position is the record's place in its response (0, 1, 2, …; heartbeats count).
	Position int64
	// StreamID is the Stream-Id of the response that delivered the message.
	StreamID string
}

// AckError is a partial answer to Ack or Nack: the ids or positions the stream did not
// hold (acknowledged already, timed out, never delivered on it); the others were taken.
type AckError struct {
	Status  int
	Unknown []string // as sent: ids, or positions in decimal
	Message string
}

func (e *AckError) Error() string {
	return fmt.Sprintf("bridge answered %d: %s (not held: %s)", e.Status, e.Message, strings.Join(e.Unknown, ", "))
}

// Subscriber reads a stream and reconnects when its response ends. Next is for one
// goroutine; Ack and Nack may be called from others.
type Subscriber struct {
	opts    SubscriberOptions
	getURL  string
	ackURL  string
	nackURL string
	conn    connection
	backoff Backoff

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	msgs   chan *Message

	mu       sync.Mutex
	streamID string         // the open response's Stream-Id, "" between responses
	cookies  []*http.Cookie // the open response's cookies: a load balancer's affinity, sent with its acks
	err      error          // why reading stopped for good
}

// NewSubscriber checks opts and starts reading. Close it to stop.
func NewSubscriber(opts SubscriberOptions) (*Subscriber, error) {
	u, err := checkURL("stream URL", opts.URL)
	if err != nil {
		return nil, err
	}
	switch opts.Ack {
	case AckStream, AckAuto, AckClient:
	default:
		return nil, fmt.Errorf("client: ack mode %q: want auto or client (or empty for the stream's)", opts.Ack)
	}
	if opts.MaxRecordSize < 0 {
		return nil, fmt.Errorf("client: MaxRecordSize %d is negative", opts.MaxRecordSize)
	}
	if opts.MaxRecordSize == 0 {
		opts.MaxRecordSize = 64 << 20
	}
	q := u.Query()
	for _, kv := range [][2]string{{"subscription", opts.Subscription}, {"position", opts.Position}, {"ack", string(opts.Ack)}, {"envelope", opts.Envelope}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	get := *u
	get.RawQuery = q.Encode()
	ack, nack := *u, *u
	ack.RawQuery, nack.RawQuery = "", ""
	ack.Path, nack.Path = strings.TrimSuffix(u.Path, "/")+"/ack", strings.TrimSuffix(u.Path, "/")+"/nack"
	ack.RawPath, nack.RawPath = "", ""
	s := &Subscriber{
		opts:    opts,
		getURL:  get.String(),
		ackURL:  ack.String(),
		nackURL: nack.String(),
		conn:    newConnection(opts.HTTPClient, opts.TLSConfig, opts.Token, opts.Header),
		backoff: opts.Backoff.withDefaults(),
		done:    make(chan struct{}),
		msgs:    make(chan *Message),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Next returns the next message, waiting until one comes or ctx ends. After the
// Subscriber stopped for good it returns why: ErrClosed after Close, io.EOF when the
// topic has ended (terminated, everything delivered), or the bridge's refusal.
func (s *Subscriber) Next(ctx context.Context) (*Message, error) {
	select {
	case m := <-s.msgs:
		return m, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Ack acknowledges messages of the open response (by ID when they have one, else by
// Position), with the Stream-Id and the cookies of that response, so a load balancer
// with cookie affinity sends the acknowledgement to the replica that serves the stream. A message of a response that has ended is not sent: the error wraps
// ErrResponseEnded, and the message comes again. A broker failure is retried on the ids
// not acknowledged until ctx ends.
func (s *Subscriber) Ack(ctx context.Context, msgs ...*Message) error {
	return s.post(ctx, s.ackURL, msgs)
}

// Nack asks for messages of the open response to be delivered again after the stream's
// retry backoff; the rules are Ack's.
func (s *Subscriber) Nack(ctx context.Context, msgs ...*Message) error {
	return s.post(ctx, s.nackURL, msgs)
}

// Close stops reading and ends the open response; what it delivered without an
// acknowledgement goes back to the subscription.
func (s *Subscriber) Close() error {
	s.cancel()
	<-s.done
	s.conn.close()
	return nil
}

func (s *Subscriber) stop(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// errEndOfTopic: the response ended with the trailer Stream-End: end-of-topic.
var errEndOfTopic = errors.New("the topic was terminated and everything in it delivered")

// run reads one response after another.
func (s *Subscriber) run() {
	defer close(s.done)
	attempt := 0
	for {
		delivered, cause, wait, fatal := s.read()
		if fatal != nil {
			s.stop(fatal)
			return
		}
		if delivered > 0 {
			attempt = 0
		}
		if errors.Is(cause, errEndOfTopic) {
			if delivered == 0 {
				// Terminated, and nothing was left to deliver (a response that did
				// deliver may leave messages unacknowledged to come again).
				s.stop(io.EOF)
				return
			}
		}
		if cause == nil {
			cause = errors.New("the response ended")
		}
		wait = max(wait, s.backoff.next(attempt))
		attempt++
		if s.opts.OnReconnect != nil {
			s.opts.OnReconnect(cause, wait)
		}
		if sleep(s.ctx, wait) != nil {
			s.stop(ErrClosed)
			return
		}
	}
}

// read opens the stream and delivers its records until the response ends: cause nil for
// a clean end, fatal for an answer that will not change by retrying.
func (s *Subscriber) read() (delivered int64, cause error, wait time.Duration, fatal error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.getURL, nil)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("client: %w", err)
	}
	if err := s.conn.prepare(s.ctx, req); err != nil {
		return 0, err, 0, nil
	}
	req.Header.Set("Accept", "application/recordio")
	if s.opts.MessageAccept != "" {
		req.Header.Set("Message-Accept", s.opts.MessageAccept)
	}
	resp, err := s.conn.client.Do(req)
	if err != nil {
		if s.ctx.Err() != nil {
			return 0, nil, 0, ErrClosed
		}
		return 0, err, 0, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		se := statusError(resp)
		switch resp.StatusCode {
		case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable,
			http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusInternalServerError:
			// 409: an Exclusive or Failover subscription's consumer is still held by the
			// response before (its bridge has not noticed the client is gone). 502 here
			// is a load balancer with no replica, or a broker refusing the subscription;
			// the refusal is repeated and reported by OnReconnect.
			return 0, se, se.RetryAfter, nil
		}
		return 0, nil, 0, se
	}
	id := resp.Header.Get("Stream-Id")
	s.mu.Lock()
	s.streamID, s.cookies = id, resp.Cookies()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streamID, s.cookies = "", nil
		s.mu.Unlock()
	}()
	rd := recordio.NewReader(resp.Body, recordio.MaxRecordSize(s.opts.MaxRecordSize))
	for pos := int64(0); ; pos++ {
		rec, err := rd.Next()
		if err != nil {
			if s.ctx.Err() != nil {
				return delivered, nil, 0, ErrClosed
			}
			if errors.Is(err, io.EOF) {
				if msg := resp.Trailer.Get("Stream-Error"); msg != "" {
					return delivered, fmt.Errorf("the stream ended: %s", msg), 0, nil
				}
				if resp.Trailer.Get("Stream-End") == "end-of-topic" {
					return delivered, errEndOfTopic, 0, nil
				}
				// A clean end without either trailer: the bridge drained (a restart, a
				// reload); never the topic's end.
				return delivered, nil, 0, nil
			}
			return delivered, fmt.Errorf("reading the stream: %w", err), 0, nil
		}
		m := &Message{Data: bytes.Clone(rec), Position: pos, StreamID: id}
		if m.Data == nil {
			m.Data = []byte{}
		}
		if s.opts.Envelope == "json" || s.opts.StreamEnvelope && s.opts.Envelope == "" {
			var env struct {
				MessageID       string `json:"messageId"`
				RedeliveryCount int    `json:"redeliveryCount"`
			}
			if json.Unmarshal(rec, &env) == nil {
				m.ID, m.RedeliveryCount = env.MessageID, env.RedeliveryCount
			}
		}
		select {
		case s.msgs <- m:
			delivered++
		case <-s.ctx.Done():
			return delivered, nil, 0, ErrClosed
		}
	}
}

// post sends an /ack or /nack for msgs.
func (s *Subscriber) post(ctx context.Context, target string, msgs []*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s.mu.Lock()
	open, cookies := s.streamID, s.cookies
	s.mu.Unlock()
	var items []json.RawMessage
	var ended []string
	once := map[string]bool{}
	for _, m := range msgs {
		ref := m.ref()
		if m.StreamID == "" || m.StreamID != open {
			ended = append(ended, ref)
			continue
		}
		if once[ref] {
			continue // the same message twice (delivered again on the stream): one ack
		}
		once[ref] = true
		if m.ID != "" {
			items = append(items, json.RawMessage(strconv.Quote(m.ID)))
		} else {
			items = append(items, json.RawMessage(ref))
		}
	}
	var errs []error
	if len(ended) > 0 {
		errs = append(errs, fmt.Errorf("client: %s: %w", strings.Join(ended, ", "), ErrResponseEnded))
	}
	attempt := 0
	for len(items) > 0 {
		retry, wait, err := s.postOnce(ctx, target, open, cookies, items)
		if err != nil && retry == nil {
			errs = append(errs, err)
			break
		}
		items = retry
		if len(items) == 0 {
			break
		}
		if sleep(ctx, max(wait, s.backoff.next(attempt))) != nil {
			errs = append(errs, fmt.Errorf("client: %d not acknowledged: %w (last: %v)", len(items), ctx.Err(), err))
			break
		}
		attempt++
	}
	return errors.Join(errs...)
}

// postOnce posts items once; retry holds what to post again after a broker failure.
func (s *Subscriber) postOnce(ctx context.Context, target, streamID string, cookies []*http.Cookie, items []json.RawMessage) (retry []json.RawMessage, wait time.Duration, err error) {
	body, _ := json.Marshal(items)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("client: %w", err)
	}
	if err := s.conn.prepare(ctx, req); err != nil {
		return items, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stream-Id", streamID)
	for _, c := range cookies {
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	}
	resp, err := s.conn.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("client: %w", err)
		}
		return items, 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	var ans struct {
		Error    string            `json:"error"`
		NotAcked []json.RawMessage `json:"notAcked"`
		Unknown  []json.RawMessage `json:"unknown"`
	}
	_ = json.Unmarshal(data, &ans)
	switch resp.StatusCode {
	case http.StatusOK:
		return nil, 0, nil
	case http.StatusServiceUnavailable:
		se := &StatusError{Status: resp.StatusCode, Message: ans.Error, RetryAfter: retryAfter(resp.Header)}
		if len(ans.NotAcked) > 0 {
			return ans.NotAcked, se.RetryAfter, se
		}
		return items, se.RetryAfter, se
	case http.StatusConflict, http.StatusNotFound:
		// 409: no stream of this Stream-Id is open on the process the ack reached (it
		// ended, or a load balancer sent the ack to another replica); 404: another
		// stream's. Nothing was acknowledged; the messages come again.
		return nil, 0, fmt.Errorf("client: %w (the bridge answered %d: %s)", ErrResponseEnded, resp.StatusCode, ans.Error)
	case http.StatusBadRequest:
		if len(ans.Unknown) > 0 {
			ae := &AckError{Status: resp.StatusCode, Message: ans.Error}
			for _, u := range ans.Unknown {
				var s string
				if json.Unmarshal(u, &s) != nil {
					s = string(u)
				}
				ae.Unknown = append(ae.Unknown, s)
			}
			return nil, 0, ae
		}
	}
	msg := ans.Error
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return nil, 0, &StatusError{Status: resp.StatusCode, Message: msg}
}

// ref names the message in errors and, without an id, in the body: its position.
func (m *Message) ref() string {
	if m.ID != "" {
		return m.ID
	}
	return strconv.FormatInt(m.Position, 10)
}
