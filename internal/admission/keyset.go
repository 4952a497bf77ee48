package admission

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/config"
)

// jwksClient fetches discovery documents and key sets.
var jwksClient = &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}

// ErrIdentityProviderUnavailable: a configured issuer's keys cannot be had (its
// discovery document or its key set could not be read), so the bridge cannot judge a
// token of that issuer now. It is the bridge's problem, not the token's: ingress and
// egress answer it as unavailable, not as unauthenticated.
var ErrIdentityProviderUnavailable = errors.New("the identity provider cannot be reached")

// ProviderError is an ErrIdentityProviderUnavailable of one issuer (its name in the
// configuration); Err says what failed, with URLs meant for the log, not for callers.
type ProviderError struct {
	Issuer string
	Err    error
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("issuer %s: %v: %v", e.Issuer, ErrIdentityProviderUnavailable, e.Err)
}
func (e *ProviderError) Unwrap() []error { return []error{ErrIdentityProviderUnavailable, e.Err} }

// keyRetryInterval is the least time between two attempts while an issuer's keys could
// not be had at all (discovery or JWKS failing).
const keyRetryInterval = time.Second

// errRefreshLimited: the key set holds no key for the token and was fetched less than
// its interval ago.
var errRefreshLimited = errors.New("refresh limited")

// logger receives the transitions of the identity providers' reachability.
var logger atomic.Pointer[slog.Logger]

// SetLogger sets where the package logs an identity provider becoming unreachable
// (with the URL and the error) and reachable again; nowhere by default.
func SetLogger(l *slog.Logger) { logger.Store(l) }

func logf() *slog.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// keySource is an issuer's key set: found by discovery on first use (unless jwksUrl
// is configured), kept across reloads, fetched again on a token naming a key id it
// does not hold at most every auth.jwt[].keyRefreshInterval. It is go-oidc's KeySet
// (the interface it offers for key sets of one's own), with the limit go-oidc's
// RemoteKeySet does not have: that one fetches for every unknown key id.
type keySource struct {
	issuer, jwksURL, caFile string
	// interval is the least time between two fetches once one succeeded
	// (auth.jwt[].keyRefreshInterval): a token naming a key id the set does not hold
	// fetches it again only when the last fetch is older.
	interval time.Duration

	fetches, fetchErrors, refused, verified atomic.Int64

	mu       sync.Mutex
	client   *http.Client // jwksClient, or one trusting caFile
	jwks     string       // jwksURL, or the discovered jwks_uri
	keys     []jose.JSONWebKey
	fetched  bool          // keys hold a fetched set
	tried    time.Time     // the last attempt to fetch, successful or not
	err      error         // the last attempt's error; nil once one succeeded
	inflight chan struct{} // closed when the fetch under way ends
}

var _ oidc.KeySet = (*keySource)(nil)

// keySources keeps each issuer's key set across reloads (by issuer, JWKS URL, CA file
// and refresh interval).
var keySources sync.Map // string -> *keySource

func sourceFor(j config.JWTIssuer) *keySource {
	interval := j.EffectiveKeyRefreshInterval()
	k := j.Issuer + "\x00" + j.JWKSURL + "\x00" + j.CAFile + "\x00" + interval.String()
	if ks, ok := keySources.Load(k); ok {
		return ks.(*keySource)
	}
	ks, _ := keySources.LoadOrStore(k, &keySource{issuer: j.Issuer, jwksURL: j.JWKSURL, caFile: j.CAFile, jwks: j.JWKSURL, interval: interval})
	return ks.(*keySource)
}

// IssuerKeyStats are the counters of one issuer's key set.
type IssuerKeyStats struct {
	Issuer string // the issuer URL, as configured
	// Fetches and FetchErrors count the attempts to fetch the JWKS (with discovery
	// first when it is not known yet) and those that failed.
	Fetches, FetchErrors int64
	// RefreshesRefused counts the tokens naming a key id the set does not hold that did
	// not fetch it again, because the last fetch was less than the refresh interval ago.
	RefreshesRefused int64
	// Verifications counts the tokens whose signature was checked (once per request).
	Verifications int64
}

// JWKSStats returns the counters of every issuer's key set used since the start.
func JWKSStats() []IssuerKeyStats {
	var out []IssuerKeyStats
	keySources.Range(func(_, v any) bool {
		ks := v.(*keySource)
		out = append(out, IssuerKeyStats{Issuer: ks.issuer, Fetches: ks.fetches.Load(), FetchErrors: ks.fetchErrors.Load(), RefreshesRefused: ks.refused.Load(), Verifications: ks.verified.Load()})
		return true
	})
	return out
}

// status is the last attempt's error (nil when it succeeded or none was made yet).
func (ks *keySource) status() error {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.err
}

// httpClient is jwksClient, or for an issuer with a caFile a client trusting it (read
// once; a failure is retried on the next attempt). Called with mu held.
func (ks *keySource) httpClient() (*http.Client, error) {
	if ks.caFile == "" {
		return jwksClient, nil
	}
	if ks.client == nil {
		pool, err := config.LoadCAFile(ks.caFile)
		if err != nil {
			return nil, fmt.Errorf("caFile: %v", err)
		}
		tr := jwksClient.Transport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		ks.client = &http.Client{Timeout: jwksClient.Timeout, Transport: tr}
	}
	return ks.client, nil
}

// get returns the keys, fetching them when none were fetched yet (at most every
// keyRetryInterval while that fails) or, with refresh, when the last fetch is older
// than its interval (errRefreshLimited otherwise; after a failed refresh, the failure,
// and a new attempt every keyRetryInterval). A fetch under way is joined,
// never doubled. Its other errors are the fetch's.
func (ks *keySource) get(ctx context.Context, refresh bool) ([]jose.JSONWebKey, error) {
	ks.mu.Lock()
	if ch := ks.inflight; ch != nil {
		ks.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the issuer's keys: %w", ctx.Err())
		}
		ks.mu.Lock()
		defer ks.mu.Unlock()
		if ks.err != nil && (refresh || !ks.fetched) {
			return nil, ks.err // the fetch joined failed
		}
		return ks.keys, nil
	}
	since := time.Since(ks.tried)
	switch {
	case !ks.fetched && since < keyRetryInterval:
		err := ks.err
		ks.mu.Unlock()
		return nil, fmt.Errorf("%w (tried %s ago)", err, since.Round(time.Millisecond))
	case ks.fetched && !refresh:
		keys := ks.keys
		ks.mu.Unlock()
		return keys, nil
	case ks.fetched && ks.err != nil && since < min(ks.interval, keyRetryInterval):
		// The last refresh failed: the key set may lack the token's key, so it cannot be
		// judged (the provider's unavailability, not the token's fault), and the next
		// attempt comes as soon as it does while no keys could be had at all.
		err := ks.err
		ks.mu.Unlock()
		ks.refused.Add(1)
		return nil, fmt.Errorf("%w (tried %s ago)", err, since.Round(time.Millisecond))
	case ks.fetched && ks.err == nil && since < ks.interval:
		ks.mu.Unlock()
		ks.refused.Add(1)
		return nil, errRefreshLimited
	}
	ch := make(chan struct{})
	ks.inflight, ks.tried = ch, time.Now()
	hc, err := ks.httpClient()
	jwks := ks.jwks
	ks.mu.Unlock()

	// The fetch is shared by every request waiting for it: it runs to its own timeout
	// (the client's), whatever becomes of the request that started it.
	var keys []jose.JSONWebKey
	if err == nil {
		keys, jwks, err = fetchKeys(oidc.ClientContext(context.Background(), hc), hc, ks.issuer, jwks)
	}
	ks.fetches.Add(1)
	ks.mu.Lock()
	was := ks.err
	if err != nil {
		ks.fetchErrors.Add(1)
		ks.err = err
		if was == nil {
			logf().Warn("identity provider unreachable: tokens of its issuer are answered 503 until it is back", "issuer", ks.issuer, "url", jwks, "err", err)
		}
	} else {
		ks.keys, ks.fetched, ks.jwks, ks.err = keys, true, jwks, nil
		if was != nil {
			logf().Info("identity provider reachable again", "issuer", ks.issuer, "url", jwks)
		}
	}
	ks.inflight = nil
	close(ch)
	ks.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// maxJWKS bounds what is read of a key set.
const maxJWKS = 1 << 20

// fetchKeys reads the issuer's key set from jwks, or first from its discovery document
// when jwks is "": the document is at the issuer without its trailing slash followed by
// /.well-known/openid-configuration, and its issuer must be the configured one exactly
// (go-oidc's NewProvider checks both). It returns the keys and the JWKS URL.
func fetchKeys(ctx context.Context, hc *http.Client, issuer, jwks string) ([]jose.JSONWebKey, string, error) {
	if jwks == "" {
		p, err := oidc.NewProvider(ctx, issuer)
		if err != nil {
			return nil, "", fmt.Errorf("reading the issuer's discovery document: %v", err)
		}
		var doc struct {
			JWKSURL string `json:"jwks_uri"`
		}
		if err := p.Claims(&doc); err != nil {
			return nil, "", fmt.Errorf("reading the issuer's discovery document: %v", err)
		}
		if doc.JWKSURL == "" {
			return nil, "", errors.New("the issuer's discovery document names no jwks_uri")
		}
		jwks = doc.JWKSURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, jwks, nil)
	if err != nil {
		return nil, "", fmt.Errorf("the JWKS URL %s: %v", jwks, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("fetching the JWKS: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("fetching the JWKS %s: %v", jwks, err)
	case resp.StatusCode != http.StatusOK:
		return nil, "", fmt.Errorf("fetching the JWKS %s: %s", jwks, resp.Status)
	case len(body) > maxJWKS:
		return nil, "", fmt.Errorf("the JWKS %s is larger than %d bytes", jwks, maxJWKS)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, "", fmt.Errorf("the JWKS %s does not parse: %v", jwks, err)
	}
	return set.Keys, jwks, nil
}

// VerifySignature verifies raw's signature with the key its kid names (every key for a
// token without one), fetching the key set again when it holds no such key and the
// interval allows. Its errors are errRefreshLimited wrapped with what was tried, an
// error of the fetch, or a signature that does not verify.
func (ks *keySource) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	algs := make([]jose.SignatureAlgorithm, len(config.JWTAlgorithms))
	for i, a := range config.JWTAlgorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	jws, err := jose.ParseSigned(raw, algs)
	if err != nil {
		return nil, fmt.Errorf("not a JWS: %w", errSignature)
	}
	ks.verified.Add(1)
	kid := jws.Signatures[0].Header.KeyID
	keys, err := ks.get(ctx, false)
	if err != nil {
		return nil, err
	}
	payload, known, ok := verifyWith(jws, keys, kid)
	if ok {
		return payload, nil
	}
	// No key held verifies it: the key set is fetched again, as for a key id it does not
	// hold, since a provider may publish a new key under a key id it used before (go-oidc's
	// RemoteKeySet fetches on any failure too). The refresh interval bounds what forged
	// signatures cost either way.
	keys, err = ks.get(ctx, true)
	if errors.Is(err, errRefreshLimited) {
		if known {
			return nil, fmt.Errorf("%w: the key %q does not verify it, and the key set was fetched less than %s ago", errSignature, kid, ks.interval)
		}
		return nil, fmt.Errorf("%w: the key set holds no key %q, and was fetched less than %s ago", errSignature, kid, ks.interval)
	}
	if err != nil {
		return nil, err
	}
	if payload, _, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	return nil, fmt.Errorf("%w: the key set holds no key %q that verifies it", errSignature, kid)
}

// errSignature: the token's signature does not verify with the issuer's keys.
var errSignature = errors.New("the signature does not verify with the issuer's keys")

// verifyWith verifies jws with the keys of id kid (every key when kid is ""): the
// payload when one verifies it; known when a key of that id is held.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known, ok bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		if kid != "" {
			known = true
		}
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, known, true
		}
	}
	return nil, known, false
}

// UnavailableMessage is what a caller is told when its token could not be judged
// (ErrIdentityProviderUnavailable): nothing of the provider's URL or of the error,
// which are logged and shown by /readyz.
const UnavailableMessage = "the bearer token cannot be verified now: the identity provider is unreachable; try again later"
