// Package oidctest is an OpenID provider for tests: discovery, a JWKS and a token
// endpoint granting client credentials, signing RS256 JWTs with a key it rotates on
// command, and switches to make it refuse or fall silent like an identity provider
// that is down. It is built on go-jose (signing and JWKS encoding); everything else
// is the few lines of the protocol a client-credentials client and a JWT verifier use.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Client is a registered client: its secret, the subject its tokens carry (the client
// id when empty) and the scope granted when it asks for none.
type Client struct {
	Secret  string
	Subject string
	Scope   string
}

// Provider is a running test OpenID provider.
type Provider struct {
	srv *httptest.Server

	mu       sync.Mutex
	keys     []*key // keys[len-1] signs; earlier ones stay in the JWKS until dropped
	nextKid  int
	clients  map[string]Client
	lifetime time.Duration
	audience string // the aud of tokens requested without an audience

	down        atomic.Bool
	tokenCalls  atomic.Int64
	failedCalls atomic.Int64
}

type key struct {
	kid  string
	priv *rsa.PrivateKey
}

// Options configure New.
type Options struct {
	// TLS serves https with httptest's certificate (Provider.TLSCertificatePEM).
	TLS bool
	// Addr is the loopback address to listen on ("127.0.0.1:0" when empty): a broker
	// configured with the issuer needs the same URL across restarts of the provider.
	Addr string
	// Lifetime of issued tokens [1 h].
	Lifetime time.Duration
}

// New starts a provider; Close stops it.
func New(o Options) (*Provider, error) {
	p := &Provider{clients: map[string]Client{}, lifetime: o.Lifetime}
	if p.lifetime <= 0 {
		p.lifetime = time.Hour
	}
	if err := p.Rotate(false); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewUnstartedServer(mux)
	if o.Addr != "" {
		ln, err := listen(o.Addr)
		if err != nil {
			return nil, err
		}
		p.srv.Listener.Close()
		p.srv.Listener = ln
	}
	if o.TLS {
		p.srv.StartTLS()
	} else {
		p.srv.Start()
	}
	return p, nil
}

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

// Issuer is the provider's issuer URL (no trailing slash).
func (p *Provider) Issuer() string { return p.srv.URL }

// HTTPClient is a client trusting the provider's certificate.
func (p *Provider) HTTPClient() *http.Client { return p.srv.Client() }

// TLSCertificatePEM is the provider's certificate in PEM, for a trust store (TLS only).
func (p *Provider) TLSCertificatePEM() []byte {
	if p.srv.TLS == nil {
		return nil
	}
	return certPEM(p.srv.TLS.Certificates[0])
}

// AddClient registers a client.
func (p *Provider) AddClient(id string, c Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[id] = c
}

// SetLifetime changes the lifetime of the tokens issued from now on.
func (p *Provider) SetLifetime(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifetime = d
}

// SetAudience sets the aud of tokens requested without an audience parameter.
func (p *Provider) SetAudience(aud string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.audience = aud
}

// SetDown makes every endpoint answer 503 (true) or serve again (false).
func (p *Provider) SetDown(down bool) { p.down.Store(down) }

// TokenCalls is how many token requests were answered with a token; FailedCalls how
// many were refused or met a provider that was down.
func (p *Provider) TokenCalls() int64  { return p.tokenCalls.Load() }
func (p *Provider) FailedCalls() int64 { return p.failedCalls.Load() }

// Rotate makes a new RSA key the signing key. With keepOld the previous keys stay in
// the JWKS (a graceful rotation); without, only the new one is published.
func (p *Provider) Rotate(keepOld bool) error {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextKid++
	k := &key{kid: "k" + strconv.Itoa(p.nextKid), priv: priv}
	if keepOld {
		p.keys = append(p.keys, k)
	} else {
		p.keys = []*key{k}
	}
	return nil
}

// KeyID is the kid of the current signing key.
func (p *Provider) KeyID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[len(p.keys)-1].kid
}

// Sign signs claims with the current key (RS256) as the token endpoint does: for
// tests that need a token the endpoint would not issue (expired, another audience).
func (p *Provider) Sign(claims map[string]any) (string, error) {
	p.mu.Lock()
	k := p.keys[len(p.keys)-1]
	p.mu.Unlock()
	return SignWith(k.priv, k.kid, jose.RS256, claims)
}

// SignWith signs claims with any key and algorithm (a key the provider does not
// publish, HS256 with a shared secret).
func SignWith(k any, kid string, alg jose.SignatureAlgorithm, claims map[string]any) (string, error) {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: k}, opts)
	if err != nil {
		return "", err
	}
	return jwt.Signed(s).Claims(claims).Serialize()
}

// Claims returns the standard claims of a token for subject and audience issued now.
func (p *Provider) Claims(subject, audience string, lifetime time.Duration) map[string]any {
	now := time.Now()
	return map[string]any{"iss": p.Issuer(), "sub": subject, "aud": audience, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(lifetime).Unix()}
}

func (p *Provider) discovery(w http.ResponseWriter, r *http.Request) {
	if p.refuseDown(w) {
		return
	}
	iss := p.Issuer()
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": iss, "token_endpoint": iss + "/token", "jwks_uri": iss + "/jwks",
		"grant_types_supported": []string{"client_credentials"}, "response_types_supported": []string{"token"},
		"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "client_secret_basic"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, r *http.Request) {
	if p.refuseDown(w) {
		return
	}
	p.mu.Lock()
	var set jose.JSONWebKeySet
	for _, k := range p.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, set)
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if p.refuseDown(w) {
		p.failedCalls.Add(1)
		return
	}
	if err := r.ParseForm(); err != nil {
		p.refuse(w, http.StatusBadRequest, "invalid_request", "the body is not a form")
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		p.refuse(w, http.StatusBadRequest, "unsupported_grant_type", fmt.Sprintf("grant_type %q is not client_credentials", gt))
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	p.mu.Lock()
	c, ok := p.clients[id]
	lifetime, defAud := p.lifetime, p.audience
	p.mu.Unlock()
	if !ok || c.Secret != secret {
		p.refuse(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return
	}
	sub := c.Subject
	if sub == "" {
		sub = id
	}
	aud := r.PostForm.Get("audience")
	if aud == "" {
		aud = defAud
	}
	scope := r.PostForm.Get("scope")
	if scope == "" {
		scope = c.Scope
	}
	claims := p.Claims(sub, aud, lifetime)
	if aud == "" {
		delete(claims, "aud")
	}
	if scope != "" {
		claims["scope"] = scope
	}
	claims["client_id"] = id
	tok, err := p.Sign(claims)
	if err != nil {
		p.refuse(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	p.tokenCalls.Add(1)
	w.Header().Set("Cache-Control", "no-store")
	body := map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int64(lifetime / time.Second)}
	if scope != "" {
		body["scope"] = scope
	}
	writeJSON(w, http.StatusOK, body)
}

func (p *Provider) refuseDown(w http.ResponseWriter) bool {
	if !p.down.Load() {
		return false
	}
	http.Error(w, "the provider is down", http.StatusServiceUnavailable)
	return true
}

func (p *Provider) refuse(w http.ResponseWriter, status int, code, desc string) {
	p.failedCalls.Add(1)
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func certPEM(c tls.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
}
