package config

import (
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/oauth2"
)

// Auth holds the bearer tokens of the data listener: static tokens and the issuers of
// JWTs. Without either every request is allowed (the pod-local default); with any,
// every request needs a token (either kind) that grants it.
type Auth struct {
	Tokens []Token     `yaml:"tokens"`
	JWT    []JWTIssuer `yaml:"jwt"`
}

// JWTIssuer is an OpenID issuer whose JWTs are accepted as bearer tokens: signed by a
// key of its JWKS, issued by Issuer for Audience, unexpired; what a token may do is in
// its GrantsClaim.
type JWTIssuer struct {
	Name     string `yaml:"name"`     // required; used in logs and errors
	Issuer   string `yaml:"issuer"`   // required; the tokens' iss, exactly
	Audience string `yaml:"audience"` // required; one of the tokens' aud
	// JWKSURL is where the signing keys are; by default the jwks_uri of the issuer's
	// discovery document (Issuer/.well-known/openid-configuration).
	JWKSURL string `yaml:"jwksUrl"`
	// GrantsClaim names the claim listing the grants, space-separated (as OAuth's
	// scope) or a JSON array: publish:<route>, read:<stream>, publish:*, read:*.
	GrantsClaim string `yaml:"grantsClaim"` // scope
	// Algorithms are the signature algorithms accepted (asymmetric only: none and HS*
	// are refused).
	Algorithms []string `yaml:"algorithms"` // RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA
	// CAFile holds the PEM certificates of the CAs trusted for the issuer's https
	// (discovery and JWKS), instead of the system roots.
	CAFile string `yaml:"caFile"` // system roots
	// KeyRefreshInterval is the least time between two fetches of the JWKS: a token
	// naming a key id the bridge does not hold fetches it again only when the last
	// fetch is older, so a rotated key is picked up by its first token after that, and
	// forged key ids cannot make the bridge fetch more often.
	KeyRefreshInterval Duration `yaml:"keyRefreshInterval"` // 10s; 1s at least
}

// DefaultKeyRefreshInterval is JWTIssuer.KeyRefreshInterval's default.
const DefaultKeyRefreshInterval = 10 * time.Second

// EffectiveKeyRefreshInterval is KeyRefreshInterval or its default.
func (j JWTIssuer) EffectiveKeyRefreshInterval() time.Duration {
	if j.KeyRefreshInterval == 0 {
		return DefaultKeyRefreshInterval
	}
	return j.KeyRefreshInterval.D()
}

// LoadCAFile reads a file of PEM certificates into a pool of trusted roots.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// JWTAlgorithms are the signature algorithms an issuer may use, and the default list.
var JWTAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// EffectiveGrantsClaim is GrantsClaim or its default.
func (j JWTIssuer) EffectiveGrantsClaim() string {
	if j.GrantsClaim == "" {
		return "scope"
	}
	return j.GrantsClaim
}

// EffectiveAlgorithms is Algorithms or the default list.
func (j JWTIssuer) EffectiveAlgorithms() []string {
	if len(j.Algorithms) == 0 {
		return JWTAlgorithms
	}
	return j.Algorithms
}

// Token is one bearer token, given by its SHA-256 (hex) or read from a file, and what it
// may do: write to the listed routes, read the listed streams ("*": all of them).
type Token struct {
	Name    string   `yaml:"name"`    // required; used in logs instead of the token
	SHA256  string   `yaml:"sha256"`  // hex SHA-256 of the token
	File    string   `yaml:"file"`    // or a file holding the token (re-read on reload)
	Routes  []string `yaml:"routes"`  // ingress routes it may publish to
	Streams []string `yaml:"streams"` // egress streams it may read and acknowledge
}

func validateAuth(a Auth, routes []Route, streams []Stream) Problems {
	var p Problems
	add := p.Addf
	routeNames := map[string]bool{"*": true}
	for _, r := range routes {
		routeNames[r.Name] = true
	}
	streamNames := map[string]bool{"*": true}
	for _, s := range streams {
		streamNames[s.Name] = true
	}
	names := map[string]bool{}
	issuers := map[string]int{}
	for i, j := range a.JWT {
		at := fmt.Sprintf("auth.jwt[%d]", i)
		if k, dup := issuers[j.Issuer]; dup && j.Issuer != "" {
			// A token names one issuer: only the first entry for it would ever be used.
			add("%s.issuer: %q is also the issuer of auth.jwt[%d], whose entry its tokens would always be checked against; merge the two", at, j.Issuer, k)
		} else {
			issuers[j.Issuer] = i
		}
		if j.Name == "" {
			add("%s.name: missing; name every issuer", at)
		} else if names[j.Name] {
			add("%s.name: %q is used twice", at, j.Name)
		}
		names[j.Name] = true
		if u, err := url.Parse(j.Issuer); j.Issuer == "" || err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			add("%s.issuer: %q is not an http(s) URL like https://idp.example/", at, j.Issuer)
		}
		if j.Audience == "" {
			add("%s.audience: missing; a token must be issued for the bridge (its aud)", at)
		}
		if j.JWKSURL != "" {
			if u, err := url.Parse(j.JWKSURL); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
				add("%s.jwksUrl: %q is not an http(s) URL", at, j.JWKSURL)
			}
		}
		if j.CAFile != "" {
			if _, err := LoadCAFile(j.CAFile); err != nil {
				add("%s.caFile: %v", at, err)
			}
		}
		if d := j.KeyRefreshInterval.D(); d != 0 && (d < time.Second || d > time.Hour) {
			add("%s.keyRefreshInterval: %s is not between 1s and 1h", at, d)
		}
		for _, alg := range j.Algorithms {
			if !slices.Contains(JWTAlgorithms, alg) {
				add("%s.algorithms: %q is not accepted: the keys come from a JWKS, so only asymmetric algorithms (%s), never none or HS*", at, alg, strings.Join(JWTAlgorithms, ", "))
			}
		}
	}
	for i, t := range a.Tokens {
		at := fmt.Sprintf("auth.tokens[%d]", i)
		if t.Name == "" {
			add("%s.name: missing; name every token (logs use the name, never the token)", at)
		} else if names[t.Name] {
			add("%s.name: %q is used twice", at, t.Name)
		}
		names[t.Name] = true
		switch {
		case (t.SHA256 == "") == (t.File == ""):
			add("%s: give either sha256 (hex of the token's SHA-256) or file (a file holding the token)", at)
		case t.SHA256 != "":
			if b, err := hex.DecodeString(t.SHA256); err != nil || len(b) != 32 {
				add("%s.sha256: not 64 hex digits (value not shown)", at)
			}
		default:
			if b, err := os.ReadFile(t.File); err != nil {
				add("%s.file: %v", at, err)
			} else if strings.TrimSpace(string(b)) == "" {
				add("%s.file: %s is empty", at, t.File)
			}
		}
		if len(t.Routes) == 0 && len(t.Streams) == 0 {
			add("%s: grants nothing; list routes and/or streams", at)
		}
		for _, r := range t.Routes {
			if !routeNames[r] {
				add("%s.routes: %q is not a configured route", at, r)
			}
		}
		for _, s := range t.Streams {
			if !streamNames[s] {
				add("%s.streams: %q is not a configured stream", at, s)
			}
		}
	}
	return p
}

func validateOAuth2(c Pulsar) Problems {
	var p Problems
	add := p.Addf
	o := c.OAuth2
	if !o.On() {
		return nil
	}
	if c.Token != "" {
		add("pulsar.oauth2: pulsar.token is set too; authenticate with one of them")
	}
	if u, err := url.Parse(o.IssuerURL); o.IssuerURL == "" || err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		add("pulsar.oauth2.issuerUrl: %q is not an http(s) URL like https://idp.example/", o.IssuerURL)
	}
	if o.PrivateKey == "" {
		add("pulsar.oauth2.privateKey: missing; write file:/path or env:NAME of the credentials {\"client_id\": ..., \"client_secret\": ...}")
	} else if v, err := o.PrivateKey.Resolve(); err != nil {
		add("pulsar.oauth2.privateKey: %v", err)
	} else if _, err := oauth2.ParseKeyFile([]byte(v)); err != nil {
		add("pulsar.oauth2.privateKey: %v", err)
	}
	if o.CAFile != "" {
		if _, err := LoadCAFile(o.CAFile); err != nil {
			add("pulsar.oauth2.caFile: %v", err)
		}
	}
	return p
}
