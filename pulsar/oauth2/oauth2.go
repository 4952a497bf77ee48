// Package oauth2 authenticates a Pulsar client with OAuth 2.0 client credentials, as the
// Java client's AuthenticationOAuth2 does: the token endpoint is found in the issuer's
// discovery document, an access token is fetched with the client's id and secret (sent in
// the form, with the audience and scope when set), kept, and fetched again once 90 % of its
// lifetime has passed. It is sent with the auth method "token", on CONNECT and in answer to
// every AUTH_CHALLENGE. An identity provider that is down leaves the current token in use
// until it expires while the refresh is retried with backoff.
package oauth2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	xoauth2 "golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/recordio-bridge/bridge/internal/backoff"
)

// Errors, matched with errors.Is.
var (
	// ErrIssuer: the issuer's discovery document could not be read or names no token endpoint.
	ErrIssuer = errors.New("oauth2: issuer discovery failed")
	// ErrRefused: the token endpoint refused the credentials (the provider's answer follows).
	ErrRefused = errors.New("oauth2: the identity provider refused the credentials")
	// ErrNoToken: no unexpired token is held (the last failure follows).
	ErrNoToken = errors.New("oauth2: no valid token")
	// ErrInvalidKeyFile: the credentials file is not {"client_id": ..., "client_secret": ...}.
	ErrInvalidKeyFile = errors.New("oauth2: invalid credentials file")
)

// KeyFile is the credentials file of the Java client's privateKey parameter.
type KeyFile struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
}

// ParseKeyFile reads a credentials file's content. Its errors never quote it.
func ParseKeyFile(b []byte) (KeyFile, error) {
	var k KeyFile
	if err := json.Unmarshal(b, &k); err != nil {
		return k, fmt.Errorf("%w: not JSON (content not shown)", ErrInvalidKeyFile)
	}
	if k.ClientID == "" || k.ClientSecret == "" {
		return k, fmt.Errorf("%w: client_id and client_secret are both required", ErrInvalidKeyFile)
	}
	return k, nil
}

// Options configure New. Zero values take the defaults in brackets.
type Options struct {
	// IssuerURL: the discovery document is IssuerURL/.well-known/openid-configuration.
	IssuerURL    string
	ClientID     string
	ClientSecret string
	// Credentials, when set, gives the client id and secret before every token request
	// instead of ClientID and ClientSecret: a credentials file read again, so a rotated
	// secret is used from the next request on. New's first call failing is New's error;
	// a later one keeps the credentials last given (logged, and reported to
	// CredentialsRefused when set).
	Credentials        func() (KeyFile, error)
	CredentialsRefused func(error)
	// Audience and Scope are sent when not empty.
	Audience string
	Scope    string
	// RefreshAfter is the fraction of a token's lifetime after which a new one is
	// fetched [0.9, the Java client's expiryAdjustment].
	RefreshAfter float64
	// Retry is the schedule of retries after a failed refresh [100 ms ×1.6 ±20 %, at most 30 s].
	Retry backoff.Schedule
	// HTTPClient makes the requests [one with a 30 s timeout].
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Source holds the client's current token and keeps it fresh. It is safe for
// concurrent use.
type Source struct {
	o      Options
	cfg    clientcredentials.Config
	log    *slog.Logger
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}
	kick   chan struct{}

	mu       sync.Mutex
	token    string
	expiry   time.Time // zero: the provider gave no lifetime
	obtained time.Time
	lastErr  error
	failures int
}

// New discovers the token endpoint and fetches a first token; either failing is an
// error naming the issuer and the provider's answer (never the secret). Then a
// goroutine keeps the token fresh until Close.
func New(ctx context.Context, o Options) (*Source, error) {
	if o.Credentials != nil {
		k, err := o.Credentials()
		if err != nil {
			return nil, fmt.Errorf("oauth2: the client credentials: %w", err)
		}
		o.ClientID, o.ClientSecret = k.ClientID, k.ClientSecret
	}
	if o.IssuerURL == "" || o.ClientID == "" || o.ClientSecret == "" {
		return nil, errors.New("oauth2: IssuerURL, ClientID and ClientSecret are required")
	}
	if o.RefreshAfter <= 0 || o.RefreshAfter >= 1 {
		o.RefreshAfter = 0.9
	}
	if o.Retry.Initial <= 0 {
		o.Retry = backoff.Schedule{Initial: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, Max: 30 * time.Second}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Source{o: o, log: o.Logger.With("issuer", o.IssuerURL), done: make(chan struct{}), kick: make(chan struct{}, 1)}
	endpoint, err := s.discover(ctx)
	if err != nil {
		return nil, err
	}
	s.cfg = clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, TokenURL: endpoint,
		AuthStyle: xoauth2.AuthStyleInParams, EndpointParams: url.Values{}}
	if o.Audience != "" {
		s.cfg.EndpointParams.Set("audience", o.Audience)
	}
	if o.Scope != "" {
		s.cfg.Scopes = []string{o.Scope}
	}
	if err := s.refresh(ctx); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Close stops the refreshes and closes the HTTP client's idle connections.
func (s *Source) Close() {
	s.cancel()
	<-s.done
	s.o.HTTPClient.CloseIdleConnections()
}

// Method is the auth method name the broker's token provider expects.
func (s *Source) Method() string { return "token" }

// Data returns the current token, or ErrNoToken once it has expired and no refresh
// has succeeded since.
func (s *Source) Data() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.validLocked() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
		return nil, s.noTokenLocked()
	}
	return []byte(s.token), nil
}

// Status says whether a valid token is held; when not, err says why (ErrNoToken
// wrapping the last failure). expiry is the current token's (zero when none or when the
// provider gave no lifetime).
func (s *Source) Status() (expiry time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.validLocked() {
		return time.Time{}, s.noTokenLocked()
	}
	return s.expiry, nil
}

func (s *Source) validLocked() bool {
	return s.token != "" && (s.expiry.IsZero() || s.o.Now().Before(s.expiry))
}

func (s *Source) noTokenLocked() error {
	if s.lastErr != nil {
		return fmt.Errorf("%w from %s: the last token expired at %s and refreshing failed: %w", ErrNoToken, s.o.IssuerURL, s.expiry.UTC().Format(time.RFC3339), s.lastErr)
	}
	return fmt.Errorf("%w from %s: the last token expired at %s", ErrNoToken, s.o.IssuerURL, s.expiry.UTC().Format(time.RFC3339))
}

// noLifetimeRefresh is how often a token the provider gave no lifetime is replaced.
const noLifetimeRefresh = 5 * time.Minute

func (s *Source) run() {
	defer close(s.done)
	for {
		t := time.NewTimer(s.nextWait())
	wait:
		for {
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
				break wait
			case <-s.kick:
				// A caller found no valid token: fetch one now, unless backing off
				// after a failure (then the retry keeps its time).
				s.mu.Lock()
				backingOff := s.failures > 0
				s.mu.Unlock()
				if !backingOff {
					t.Stop()
					break wait
				}
			}
		}
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		_ = s.refresh(ctx)
		cancel()
	}
}

// nextWait is the time until the next refresh: RefreshAfter of the token's lifetime
// after it was obtained, or the retry schedule's delay after a failure.
func (s *Source) nextWait() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		return s.o.Retry.Delay(s.failures-1, rand.Float64())
	}
	if s.expiry.IsZero() {
		return noLifetimeRefresh
	}
	at := s.obtained.Add(time.Duration(float64(s.expiry.Sub(s.obtained)) * s.o.RefreshAfter))
	return max(0, at.Sub(s.o.Now()))
}

// rereadCredentials takes the credentials Options.Credentials gives now, keeping the
// last ones when it fails. Only refresh calls it (one at a time).
func (s *Source) rereadCredentials() {
	if s.o.Credentials == nil {
		return
	}
	k, err := s.o.Credentials()
	if err != nil {
		err = fmt.Errorf("oauth2: the client credentials were not read again; the last ones stay in use: %w", err)
		s.log.Error("OAuth2 credentials not reloaded; the previous ones stay in use", "error", err.Error())
		if s.o.CredentialsRefused != nil {
			s.o.CredentialsRefused(err)
		}
		return
	}
	if k.ClientID != s.cfg.ClientID || k.ClientSecret != s.cfg.ClientSecret {
		s.cfg.ClientID, s.cfg.ClientSecret = k.ClientID, k.ClientSecret
		s.log.Info("OAuth2 credentials reloaded", "clientId", k.ClientID)
	}
}

// refresh fetches a token and keeps it, or records the failure.
func (s *Source) refresh(ctx context.Context) error {
	s.rereadCredentials()
	ctx = context.WithValue(ctx, xoauth2.HTTPClient, s.o.HTTPClient)
	now := s.o.Now()
	tok, err := s.cfg.Token(ctx)
	if err != nil {
		err = s.describe(err)
		s.mu.Lock()
		s.lastErr, s.failures = err, s.failures+1
		valid, failures := s.validLocked(), s.failures
		s.mu.Unlock()
		if s.ctx != nil && s.ctx.Err() != nil {
			return err // closing
		}
		s.log.Warn("refreshing the OAuth2 token failed", "error", err.Error(), "failures", failures, "tokenStillValid", valid)
		return err
	}
	s.mu.Lock()
	s.token, s.obtained, s.lastErr, s.failures = tok.AccessToken, now, nil, 0
	s.expiry = time.Time{}
	if tok.ExpiresIn > 0 {
		s.expiry = now.Add(time.Duration(tok.ExpiresIn) * time.Second)
	} else if !tok.Expiry.IsZero() {
		s.expiry = tok.Expiry
	}
	exp := s.expiry
	s.mu.Unlock()
	s.log.Debug("OAuth2 token refreshed", "expires", exp)
	return nil
}

// describe turns a token request's failure into an error naming the issuer and what
// the provider answered; the secret is scrubbed from it in case an answer echoed it.
func (s *Source) describe(err error) error {
	var re *xoauth2.RetrieveError
	var msg string
	var sentinel error
	switch {
	case errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500:
		sentinel = ErrRefused
		msg = fmt.Sprintf("%s answered %d", s.cfg.TokenURL, re.Response.StatusCode)
		if re.ErrorCode != "" {
			msg += " " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		} else if re.ErrorCode == "" {
			msg += ": " + truncate(strings.TrimSpace(string(re.Body)), 200)
		}
	case errors.As(err, &re) && re.Response != nil:
		msg = fmt.Sprintf("%s answered %d: %s", s.cfg.TokenURL, re.Response.StatusCode, truncate(strings.TrimSpace(string(re.Body)), 200))
	default:
		msg = err.Error()
	}
	msg = strings.ReplaceAll(msg, s.cfg.ClientSecret, "[secret]")
	msg = strings.ReplaceAll(msg, s.o.ClientSecret, "[secret]")
	if sentinel != nil {
		return fmt.Errorf("%w: issuer %s: %s", sentinel, s.o.IssuerURL, msg)
	}
	return fmt.Errorf("oauth2: issuer %s: fetching a token: %s", s.o.IssuerURL, msg)
}

// discover reads the token endpoint from the issuer's discovery document.
func (s *Source) discover(ctx context.Context) (string, error) {
	u := strings.TrimRight(s.o.IssuerURL, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrIssuer, u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.o.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrIssuer, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w: reading %s: %v", ErrIssuer, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%w: %s answered %d: %s", ErrIssuer, u, resp.StatusCode, truncate(strings.TrimSpace(string(body)), 200))
	}
	var doc struct {
		TokenEndpoint string `json:"token_endpoint"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.TokenEndpoint == "" {
		return "", fmt.Errorf("%w: %s holds no token_endpoint", ErrIssuer, u)
	}
	return doc.TokenEndpoint, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
