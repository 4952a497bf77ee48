package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// TokenSource gives the bearer token sent with each request; it is asked before every
// request, so a source that renews its token is used as it renews.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a TokenSource that always gives the same token.
type StaticToken string

// Token returns the token.
func (t StaticToken) Token(context.Context) (string, error) { return string(t), nil }

// TokenFunc adapts a function to a TokenSource.
type TokenFunc func(ctx context.Context) (string, error)

// Token calls f.
func (f TokenFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// Backoff is the wait between attempts: Initial × Multiplier^attempt, at most Max, spread
// by ±Jitter (a fraction) and never above Max (at the cap the spread folds below it). It
// is the schedule of the bridge's own Pulsar client (internal/backoff, which a package
// users import cannot import), with the same defaults.
type Backoff struct {
	Initial    time.Duration // default 100 ms
	Multiplier float64       // default 1.6
	Jitter     float64       // default 0.2; clients reconnecting together must not move in lockstep
	Max        time.Duration // default 30 s
}

// DefaultBackoff is the schedule used when a field is left zero.
var DefaultBackoff = Backoff{Initial: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, Max: 30 * time.Second}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	if b.Jitter <= 0 || b.Jitter >= 1 {
		b.Jitter = DefaultBackoff.Jitter
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// Delay is the wait before retry number attempt (0-based); u, in [0,1), picks the point in
// the spread (a random number in use, fixed in tests).
func (b Backoff) Delay(attempt int, u float64) time.Duration {
	d := float64(b.Initial)
	for range min(attempt, 64) {
		d *= b.Multiplier
		if d >= float64(b.Max) {
			break
		}
	}
	d = min(d, float64(b.Max))
	j := d * (1 + b.Jitter*(2*u-1))
	if m := float64(b.Max); j > m {
		j = m - (j - m)
	}
	return time.Duration(j)
}

func (b Backoff) next(attempt int) time.Duration { return b.Delay(attempt, rand.Float64()) }

// Errors a caller tells apart with errors.Is.
var (
	// ErrClosed: the Publisher or Subscriber was closed.
	ErrClosed = errors.New("client: closed")
	// ErrRefused matches a *RecordError: a record refused for good, never resent.
	ErrRefused = errors.New("refused for good")
	// ErrTakenOver: another request took the named stream over (the bridge answered a
	// record 409): two publishers are writing one stream name, and this one stops.
	ErrTakenOver = errors.New("the named stream was taken over by another request")
	// ErrResponseEnded: an Ack or Nack of a message whose response has ended; nothing was
	// sent, and the message will be delivered again.
	ErrResponseEnded = errors.New("the response that delivered the message has ended; it will be delivered again")
)

// StatusError is an answer of the bridge to a request as a whole that the client does not
// retry (or, as the cause of a retry, reports): its status and the bridge's error.
type StatusError struct {
	Status     int
	Message    string        // the bridge's "error", or the status text
	RetryAfter time.Duration // from Retry-After or the summary's retryAfter, 0 without
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("bridge answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("bridge answered %d: %s", e.Status, e.Message)
}

// RecordError is a record refused for good: the broker did not store it and the
// Publisher does not send it again. It matches ErrRefused.
type RecordError struct {
	Sequence uint64 // the record's number
	Status   int    // 400, 404, 413, 415, 422 or 502
	Message  string // the bridge's error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %d refused for good (%d): %s", e.Sequence, e.Status, e.Message)
}

// Is matches ErrRefused.
func (e *RecordError) Is(target error) bool { return target == ErrRefused }

// connection holds what the Publisher and the Subscriber share: the HTTP client, headers
// and credentials.
type connection struct {
	client *http.Client
	own    bool // client built here: its idle connections are closed with the owner
	token  TokenSource
	header http.Header
}

func newConnection(hc *http.Client, tlsConf *tls.Config, token TokenSource, header http.Header) connection {
	c := connection{client: hc, token: token, header: header}
	if hc == nil {
		c.client = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     tlsConf,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
		}}
		c.own = true
	}
	return c
}

func (c connection) prepare(ctx context.Context, req *http.Request) error {
	for k, vs := range c.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if c.token != nil {
		tok, err := c.token.Token(ctx)
		if err != nil {
			return fmt.Errorf("client: getting the bearer token: %w", err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	return nil
}

func (c connection) close() {
	if c.own {
		c.client.CloseIdleConnections()
	}
}

func checkURL(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("client: %s %q: %w", what, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: %s %q is not an http:// or https:// URL with a host", what, raw)
	}
	return u, nil
}

// retryAfter reads a Retry-After header in seconds (the bridge's form); 0 without one.
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
