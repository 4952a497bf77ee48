// Package oidctest is an OpenID provider for tests: discovery, a JWKS and a token
// endpoint granting client credentials, signing RS256 JWTs with a key it rotates on
// command, over http or over https with a private CA, and switches to make it refuse
// (503) or stop listening like an identity provider that is down. It is built on go-jose (signing and JWKS encoding); everything else
// is the few lines of the protocol a client-credentials client and a JWT verifier use.
package oidctest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
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
	addr   string // the listening address, kept across Stop and Start
	scheme string
	slash  bool        // the issuer ends with "/"
	tlsCfg *tls.Config // nil: plain http
	caPEM  []byte
	client *http.Client
	mux    *http.ServeMux

	srvMu sync.Mutex
	srv   *http.Server // nil while stopped

	mu       sync.Mutex
	keys     []*key // keys[len-1] signs; earlier ones stay in the JWKS until dropped
	nextKid  int
	clients  map[string]Client
	lifetime time.Duration
	audience string // the aud of tokens requested without an audience
	issued   []Issued

	down        atomic.Bool
	tokenCalls  atomic.Int64
	jwksCalls   atomic.Int64
	discoCalls  atomic.Int64
	failedCalls atomic.Int64
}

// Issued is a token the token endpoint issued and when it expires.
type Issued struct {
	Token  string
	Expiry time.Time
}

type key struct {
	kid  string
	priv *rsa.PrivateKey
}

// Options configure New.
type Options struct {
	// TLS serves https with a certificate for 127.0.0.1 signed by a CA of the
	// provider's own (Provider.CACertPEM), as an identity provider of a private PKI.
	TLS bool
	// Addr is the loopback address to listen on ("127.0.0.1:0" when empty): a broker
	// configured with the issuer needs the same URL across restarts of the provider.
	Addr string
	// Lifetime of issued tokens [1 h].
	Lifetime time.Duration
	// TrailingSlash makes the issuer end with "/" (https://host/), as Auth0's, Okta's
	// and Azure AD v1's do: its tokens' iss and its discovery document's issuer are
	// that exact string, and discovery is still at /.well-known/openid-configuration.
	TrailingSlash bool
}

// New starts a provider; Close stops it.
func New(o Options) (*Provider, error) {
	p := &Provider{clients: map[string]Client{}, lifetime: o.Lifetime, scheme: "http", slash: o.TrailingSlash}
	if p.lifetime <= 0 {
		p.lifetime = time.Hour
	}
	if err := p.Rotate(false); err != nil {
		return nil, err
	}
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	p.mux.HandleFunc("GET /jwks", p.jwks)
	p.mux.HandleFunc("POST /token", p.token)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.TLS {
		cfg, caPEM, pool, err := privateCA()
		if err != nil {
			return nil, err
		}
		p.tlsCfg, p.caPEM, p.scheme = cfg, caPEM, "https"
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	p.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

func (p *Provider) serve(ln net.Listener) {
	// The handshake errors of clients that do not trust the CA are what a test expects.
	srv := &http.Server{Handler: p.mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	if p.tlsCfg != nil {
		ln = tls.NewListener(ln, p.tlsCfg)
	}
	p.srvMu.Lock()
	p.srv = srv
	p.srvMu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop stops listening, as an identity provider that is down: connections are refused
// until Start. Its keys, clients and counters are kept.
func (p *Provider) Stop() {
	p.srvMu.Lock()
	srv := p.srv
	p.srv = nil
	p.srvMu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	p.client.CloseIdleConnections()
}

// Start listens again on the same address after Stop.
func (p *Provider) Start() error {
	p.srvMu.Lock()
	running := p.srv != nil
	p.srvMu.Unlock()
	if running {
		return nil
	}
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after Stop
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// Close stops the provider.
func (p *Provider) Close() { p.Stop() }

// Issuer is the provider's issuer URL, ending with "/" only with Options.TrailingSlash.
func (p *Provider) Issuer() string {
	if p.slash {
		return p.base() + "/"
	}
	return p.base()
}

// base is the URL the provider's endpoints are under (no trailing slash).
func (p *Provider) base() string { return p.scheme + "://" + p.addr }

// HTTPClient is a client trusting the provider's certificate.
func (p *Provider) HTTPClient() *http.Client { return p.client }

// CACertPEM is the certificate of the CA that signed the provider's TLS certificate,
// in PEM, for a trust store (TLS only).
func (p *Provider) CACertPEM() []byte { return p.caPEM }

// PublicKeyPEM is the current signing key's public half (PKIX, PEM): what an attacker
// can read from the JWKS.
func (p *Provider) PublicKeyPEM() []byte {
	p.mu.Lock()
	k := p.keys[len(p.keys)-1]
	p.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(&k.priv.PublicKey)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Issued lists the tokens the token endpoint issued, oldest first.
func (p *Provider) Issued() []Issued {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Issued(nil), p.issued...)
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

// JWKSCalls is how many times the JWKS was fetched; DiscoveryCalls how many times the
// discovery document was (answered or refused as down).
func (p *Provider) JWKSCalls() int64      { return p.jwksCalls.Load() }
func (p *Provider) DiscoveryCalls() int64 { return p.discoCalls.Load() }

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

// RotateKeepingKeyID replaces the signing key with a new RSA key published under the
// same kid, as a provider that names its keys by slot rather than by content does.
func (p *Provider) RotateKeepingKeyID() error {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	kid := p.keys[len(p.keys)-1].kid
	p.keys = []*key{{kid: kid, priv: priv}}
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
	p.discoCalls.Add(1)
	if p.refuseDown(w) {
		return
	}
	base := p.base()
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": p.Issuer(), "token_endpoint": base + "/token", "jwks_uri": base + "/jwks",
		"grant_types_supported": []string{"client_credentials"}, "response_types_supported": []string{"token"},
		"subject_types_supported": []string{"public"}, "id_token_signing_alg_values_supported": []string{"RS256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "client_secret_basic"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, r *http.Request) {
	p.jwksCalls.Add(1)
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
	p.mu.Lock()
	p.issued = append(p.issued, Issued{Token: tok, Expiry: time.Unix(claims["exp"].(int64), 0)})
	p.mu.Unlock()
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

// privateCA makes a CA and a server certificate for 127.0.0.1 and localhost signed by
// it: the server's TLS configuration, the CA's PEM and a pool trusting it.
func privateCA() (*tls.Config, []byte, *x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oidctest private CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	return cfg, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool, nil
}
