package admission

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/internal/oidctest"
)

func jwtProvider(t *testing.T) *oidctest.Provider {
	t.Helper()
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		closeIdleJWKSConnections()
	})
	return p
}

func jwtTable(t *testing.T, p *oidctest.Provider, extra string) *Tokens {
	t.Helper()
	h := sha256.Sum256([]byte("static-token"))
	return compile(t, fmt.Sprintf(`
auth:
  tokens:
    - {name: static, sha256: %s, routes: [r]}
  jwt:
    - name: corp-idp
      issuer: %s
      audience: recordio-bridge
%s
routes:
  - name: r
    default: {topic: t}
  - name: other
    default: {topic: t2}
streams:
  - name: s
    topics: [t]
`, hex.EncodeToString(h[:]), p.Issuer(), extra))
}

func sign(t *testing.T, p *oidctest.Provider, claims map[string]any) string {
	t.Helper()
	tok, err := p.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestJWTsOfAConfiguredIssuerAreGrantedByTheirScopeBesideStaticTokens(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "")
	c := p.Claims("svc-a", "recordio-bridge", time.Minute)
	c["scope"] = "openid publish:r read:s"
	tok := sign(t, p, c)
	if who, err := tab.Authorize(tok, Write, "r"); err != nil || !strings.Contains(who, `"svc-a"`) {
		t.Fatalf("publish r: %q, %v", who, err)
	}
	if _, err := tab.Authorize(tok, Read, "s"); err != nil {
		t.Fatalf("read s: %v", err)
	}
	_, err := tab.Authorize(tok, Write, "other")
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), `subject "svc-a"`) || !strings.Contains(err.Error(), "route other") {
		t.Fatalf("publish other: %v, want ErrForbidden naming the subject", err)
	}
	if _, err := tab.Authorize("static-token", Write, "r"); err != nil {
		t.Fatalf("the static token beside the issuer: %v", err)
	}
	c["scope"] = "publish:* read:*"
	if _, err := tab.Authorize(sign(t, p, c), Write, "other"); err != nil {
		t.Fatalf("publish:*: %v", err)
	}
	delete(c, "scope")
	if _, err := tab.Authorize(sign(t, p, c), Read, "s"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("no grants claim: %v, want ErrForbidden", err)
	}
}

func TestAGrantsClaimOtherThanScopeMayBeAnArray(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "      grantsClaim: bridge_grants\n")
	c := p.Claims("svc-b", "recordio-bridge", time.Minute)
	c["bridge_grants"] = []string{"read:s"}
	c["scope"] = "publish:r" // not the configured claim: grants nothing
	tok := sign(t, p, c)
	if _, err := tab.Authorize(tok, Read, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Authorize(tok, Write, "r"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("scope read although grantsClaim is bridge_grants: %v", err)
	}
}

func TestInvalidJWTsAreRefusedAsInvalidTokenSayingWhy(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "")
	good := func() map[string]any {
		c := p.Claims("svc", "recordio-bridge", time.Minute)
		c["scope"] = "publish:r"
		return c
	}
	with := func(k string, v any) map[string]any { c := good(); c[k] = v; return c }
	without := func(k string) map[string]any { c := good(); delete(c, k); return c }
	now := time.Now()
	hsKey := []byte("0123456789abcdef0123456789abcdef")
	hs, err := oidctest.SignWith(hsKey, p.KeyID(), jose.HS256, good())
	if err != nil {
		t.Fatal(err)
	}
	// HS256 keyed with the issuer's public key (anyone can read it from the JWKS): a
	// verifier that took the key's bytes as an HMAC secret would accept it.
	hsPub, err := oidctest.SignWith(p.PublicKeyPEM(), p.KeyID(), jose.HS256, good())
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	foreign, err := oidctest.SignWith(stranger, p.KeyID(), jose.ES256, good())
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(fmt.Sprintf(`{"iss":%q,"aud":"recordio-bridge","sub":"svc","exp":%d,"scope":"publish:r"}`, p.Issuer(), now.Add(time.Minute).Unix()))) + "."
	cases := []struct{ name, token, want string }{
		{"expired", sign(t, p, with("exp", now.Add(-2*time.Minute).Unix())), "expired"},
		{"not yet valid", sign(t, p, with("nbf", now.Add(2*time.Minute).Unix())), "not valid yet"},
		{"no exp", sign(t, p, without("exp")), "no exp"},
		{"another audience", sign(t, p, with("aud", "someone-else")), "not for audience recordio-bridge"},
		{"an untrusted issuer", sign(t, p, with("iss", "https://evil.example")), `issuer "https://evil.example" is not trusted`},
		{"HS256 with a shared secret", hs, "accepted algorithm"},
		{"HS256 keyed with the issuer's public key", hsPub, "accepted algorithm"},
		{"alg none", none, "accepted algorithm"},
		{"a key the issuer does not publish", foreign, "signature not verified"},
		{"garbage", "a.b.c", "not a JWT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tab.Authorize(c.token, Write, "r")
			var te *TokenError
			if !errors.As(err, &te) || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(te.Description, c.want) {
				t.Fatalf("err = %v, want a TokenError saying %q", err, c.want)
			}
			ch := Challenge(err)
			if !strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, "error_description=") {
				t.Fatalf("challenge %s", ch)
			}
			if strings.Contains(err.Error(), c.token) {
				t.Fatal("the error shows the token")
			}
		})
	}
	// A clock a little behind the issuer's is tolerated.
	if _, err := tab.Authorize(sign(t, p, with("exp", now.Add(-10*time.Second).Unix())), Write, "r"); err != nil {
		t.Fatalf("expired 10 s ago, inside the leeway: %v", err)
	}
	if ch := Challenge(fmt.Errorf("%w: send Authorization: Bearer <token>", ErrUnauthenticated)); strings.Contains(ch, "invalid_token") {
		t.Fatalf("no token given, yet %s", ch)
	}
}

// A key rotated at the provider is fetched by the first token naming it once the key
// set is older than the refresh interval.
func TestARotatedSigningKeyIsFetchedOnItsFirstTokenAfterTheInterval(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "      keyRefreshInterval: 1s\n")
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatal(err)
	}
	fetchedAt := time.Now()
	old := p.KeyID()
	if err := p.Rotate(false); err != nil {
		t.Fatal(err)
	}
	if p.KeyID() == old {
		t.Fatal("no new key")
	}
	// Within the interval the new key id is not fetched: its token is refused. (A
	// machine so slow that generating the key took the interval skips this.)
	tok := sign(t, p, c)
	var te *TokenError
	_, within := tab.Authorize(tok, Write, "r")
	if time.Since(fetchedAt) < 900*time.Millisecond && (!errors.As(within, &te) || !strings.Contains(te.Description, "fetched less than 1s ago")) {
		t.Fatalf("a token of the new key within the interval: %v, want refused", within)
	}
	time.Sleep(time.Second)
	fetched := p.JWKSCalls()
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	if within != nil && p.JWKSCalls() != fetched+1 { // (else the key was fetched within: a slow machine)
		t.Fatalf("JWKS fetched %d times for the new key, want once", p.JWKSCalls()-fetched)
	}
	// An explicit jwksUrl is used without discovery.
	tab2 := jwtTable(t, p, "      jwksUrl: "+p.Issuer()+"/jwks\n")
	if _, err := tab2.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatalf("with jwksUrl: %v", err)
	}
}

func TestAnIssuerOverHTTPSWithAPrivateCAIsTrustedThroughItsCAFile(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		closeIdleJWKSConnections()
	})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, p.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	tok := sign(t, p, c)
	// Without the CA the system roots do not know the issuer's certificate: the
	// bridge's problem, not the token's.
	_, err = jwtTable(t, p, "").Authorize(tok, Write, "r")
	var pe *ProviderError
	if !errors.As(err, &pe) || !errors.Is(err, ErrIdentityProviderUnavailable) || errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without caFile: %v, want a ProviderError naming the certificate", err)
	}
	if _, err := jwtTable(t, p, "      caFile: "+caFile+"\n").Authorize(tok, Write, "r"); err != nil {
		t.Fatalf("with caFile: %v", err)
	}
}

// closeIdleJWKSConnections closes the idle connections of every issuer's HTTP client.
func closeIdleJWKSConnections() {
	jwksClient.CloseIdleConnections()
	keySources.Range(func(_, v any) bool {
		ks := v.(*keySource)
		ks.mu.Lock()
		if ks.client != nil {
			ks.client.CloseIdleConnections()
		}
		ks.mu.Unlock()
		return true
	})
}

// An issuer whose iss ends with "/" (Auth0, Okta, Azure AD v1) is compared as
// configured, slash included, with the tokens' iss and its discovery document's issuer;
// its discovery document is still found at <issuer without the slash>/.well-known/….
func TestAnIssuerEndingWithASlashAuthenticatesItsTokens(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{TrailingSlash: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		closeIdleJWKSConnections()
	})
	if !strings.HasSuffix(p.Issuer(), "/") {
		t.Fatalf("issuer %s", p.Issuer())
	}
	tab := jwtTable(t, p, "")
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatalf("a token of issuer %s: %v", p.Issuer(), err)
	}
	// The slash is part of the issuer: a token without it is another issuer's.
	c["iss"] = strings.TrimSuffix(p.Issuer(), "/")
	var te *TokenError
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); !errors.As(err, &te) || !strings.Contains(te.Description, "not trusted") {
		t.Fatalf("a token whose iss lacks the slash: %v, want an untrusted issuer", err)
	}
}

// Tokens naming the configured issuer and a key id it does not publish (forged by
// anyone) make the bridge fetch the issuer's JWKS at most once per refresh interval,
// however many arrive; each refused refresh is counted.
func TestForgedKeyIDsFetchTheJWKSAtMostOncePerInterval(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "")
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	before := refreshesRefused(p.Issuer())
	for i := range 50 {
		forged, err := oidctest.SignWith(stranger, fmt.Sprintf("forged-%d", i), jose.ES256, c)
		if err != nil {
			t.Fatal(err)
		}
		var te *TokenError
		if _, err := tab.Authorize(forged, Write, "r"); !errors.As(err, &te) {
			t.Fatalf("forged token %d: %v, want a TokenError", i, err)
		}
	}
	if n := p.JWKSCalls(); n > 1 {
		t.Fatalf("50 forged tokens fetched the JWKS %d times; want at most 1 per interval", n)
	}
	if got := refreshesRefused(p.Issuer()) - before; got < 49 {
		t.Fatalf("refused refreshes counted: %d, want at least 49", got)
	}
	// A genuine token of the current key is still accepted from the keys held.
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatal(err)
	}
}

// refreshesRefused is the refused refreshes counted for issuer so far.
func refreshesRefused(issuer string) int64 {
	var n int64
	for _, s := range JWKSStats() {
		if s.Issuer == issuer {
			n += s.RefreshesRefused
		}
	}
	return n
}

// Forged tokens arriving together share one fetch of the key set: a fetch under way is
// joined, never doubled.
func TestConcurrentForgedKeyIDsShareOneFetch(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "")
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	errs := make(chan error, 50)
	for i := range 50 {
		forged, err := oidctest.SignWith(stranger, fmt.Sprintf("forged-%d", i), jose.ES256, c)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := tab.Authorize(forged, Write, "r")
			errs <- err
		}()
	}
	for range 50 {
		var te *TokenError
		if err := <-errs; !errors.As(err, &te) {
			t.Fatalf("a forged token: %v, want a TokenError", err)
		}
	}
	if n := p.JWKSCalls(); n > 1 {
		t.Fatalf("50 concurrent forged tokens fetched the JWKS %d times, want at most 1", n)
	}
}

// An issuer whose provider cannot be reached is the bridge's problem, not the token's:
// a ProviderError (not ErrUnauthenticated) naming it, IdentityProviders lists it with
// why, and once the provider is back (a second later at most) its tokens are judged
// again and the listing is empty.
func TestAnUnreachableIdentityProviderIsAProviderErrorUntilItIsBack(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "")
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	tok := sign(t, p, c)
	p.Stop()
	_, err := tab.Authorize(tok, Write, "r")
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Issuer != "corp-idp" || !errors.Is(err, ErrIdentityProviderUnavailable) || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("provider down: %v, want a ProviderError of corp-idp", err)
	}
	if down := tab.IdentityProviders(); !strings.Contains(down["corp-idp"], "refused") {
		t.Fatalf("IdentityProviders: %v, want corp-idp with the connection error", down)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err = tab.Authorize(tok, Write, "r"); err == nil {
			break
		}
		if !errors.As(err, &pe) || time.Now().After(deadline) {
			t.Fatalf("provider back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if down := tab.IdentityProviders(); len(down) != 0 {
		t.Fatalf("IdentityProviders after the provider is back: %v", down)
	}
}

// A key rotation reaching the bridge while its identity provider cannot be reached: the
// new key's tokens cannot be judged, so every one is the provider's unavailability (503),
// not only the one that tried the fetch; the others must not be told their valid token
// does not verify (401: a client does not retry that). Once the provider is back, a
// token of the new key is accepted after keyRetryInterval, not the whole refresh interval.
func TestTokensOfANewKeyAreAProviderErrorWhileItsRefreshFails(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "      keyRefreshInterval: 1s\n")
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatal(err)
	}
	if err := p.Rotate(false); err != nil {
		t.Fatal(err)
	}
	tok := sign(t, p, c)
	p.Stop()
	time.Sleep(1100 * time.Millisecond) // past the interval: the new key id may fetch
	for i := range 3 {
		_, err := tab.Authorize(tok, Write, "r")
		var pe *ProviderError
		if !errors.As(err, &pe) || errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("token %d of the new key while the provider is down: %v, want a ProviderError", i, err)
		}
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := tab.Authorize(tok, Write, "r")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a token of the new key once the provider is back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if down := tab.IdentityProviders(); len(down) != 0 {
		t.Fatalf("IdentityProviders after the provider is back: %v", down)
	}
}

// A provider may publish a new key under a key id it used before (key ids are names,
// not fingerprints: RFC 7517 leaves them to the provider). A token the key of its id
// does not verify fetches the key set again, within the refresh interval as an unknown
// key id does (as go-oidc's own RemoteKeySet fetches on any failure), so such a rotation
// is in effect with its first token after the interval; a token a held key refused was
// never fetched for, and the issuer's tokens were 401 until the bridge restarted.
func TestANewKeyUnderAKnownKeyIDIsFetchedAfterTheInterval(t *testing.T) {
	p := jwtProvider(t)
	tab := jwtTable(t, p, "      keyRefreshInterval: 1s\n")
	c := p.Claims("svc", "recordio-bridge", time.Minute)
	c["scope"] = "publish:r"
	if _, err := tab.Authorize(sign(t, p, c), Write, "r"); err != nil {
		t.Fatal(err)
	}
	kid := p.KeyID()
	if err := p.RotateKeepingKeyID(); err != nil {
		t.Fatal(err)
	}
	if p.KeyID() != kid {
		t.Fatalf("kid %s, want %s kept", p.KeyID(), kid)
	}
	time.Sleep(1100 * time.Millisecond) // past the interval
	fetched := p.JWKSCalls()
	tok := sign(t, p, c)
	if _, err := tab.Authorize(tok, Write, "r"); err != nil {
		t.Fatalf("a token of the new key under kid %s: %v", kid, err)
	}
	if got := p.JWKSCalls() - fetched; got != 1 {
		t.Fatalf("JWKS fetched %d times, want once", got)
	}
	// A forged signature under the held kid fetches no more often than the interval.
	forged := tok[:strings.LastIndex(tok, ".")+1] + base64.RawURLEncoding.EncodeToString(make([]byte, 256))
	for range 20 {
		if _, err := tab.Authorize(forged, Write, "r"); err == nil {
			t.Fatal("a forged signature was accepted")
		}
	}
	if got := p.JWKSCalls() - fetched; got != 1 {
		t.Fatalf("20 forged signatures under a held kid fetched the JWKS %d more times, want none within the interval", got-1)
	}
}
