package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestJWTsFromAnOpenIDProviderAreGrantedTheirRoutesAndStreamsAndEveryForgeryIsRefusedSayingWhy runs the bridge with
// auth.jwt trusting a real OpenID provider (discovery, JWKS, client credentials) and one
// static token: a client-credentials token publishes to the route its scope grants, is
// refused another route and a stream with 403 naming its subject; an expired token, one
// for another audience or issuer, one signed by another key, alg none, HS256 keyed with
// the public key and one of a key the provider rotated away are each 401 invalid_token
// saying why, on ingress and egress; after the rotation the next token works; and
// nothing the test gave the bridge or got from the provider shows in its answers,
// output or metrics.
func TestJWTsFromAnOpenIDProviderAreGrantedTheirRoutesAndStreamsAndEveryForgeryIsRefusedSayingWhy(t *testing.T) {
	b := broker.Get(t)
	idp, err := oidctest.New(oidctest.Options{Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	const secret = "jwt-e2e-client-secret-9183"
	idp.AddClient("publisher", oidctest.Client{Secret: secret, Subject: "svc-publisher", Scope: "publish:r"})
	idp.SetAudience("recordio-bridge")
	static := sha256.Sum256([]byte("static-e2e-token"))
	topic, other := b.Topic(t, "jwt"), b.Topic(t, "jwt-other")
	p := startBridge(t, fmt.Sprintf(`pulsar:
  url: %s
auth:
  tokens:
    - {name: ops, sha256: %s, routes: [other]}
  jwt:
    - name: corp-idp
      issuer: %s
      audience: recordio-bridge
      keyRefreshInterval: 1s
routes:
  - name: r
    default: {topic: %s}
  - name: other
    default: {topic: %s}
streams:
  - name: s
    topics: [%s]
`, b.URL, hex.EncodeToString(static[:]), idp.Issuer(), topic, other, topic))
	leaks := newLeakCheck()

	cc := clientcredentials.Config{ClientID: "publisher", ClientSecret: secret, TokenURL: idp.Issuer() + "/token"}
	token := func() string {
		tok, err := cc.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return tok.AccessToken
	}
	body := recordio.AppendRecord(nil, rec(1))
	post := func(route, bearer string) (int, http.Header, string) {
		h := map[string]string{"Content-Type": "application/recordio", "Message-Content-Type": "application/json"}
		if bearer != "" {
			h["Authorization"] = "Bearer " + bearer
		}
		code, hdr, out := postOne(t, p.DataURL+"/v1/publish/"+route, h, body)
		leaks.saw("an ingress answer", fmt.Sprint(hdr)+"\n"+string(out))
		return code, hdr, string(out)
	}
	// get asks for an egress stream; only refusals are expected, so the body is read whole.
	get := func(path, bearer string) (int, http.Header, string) {
		req, err := http.NewRequest(http.MethodGet, p.DataURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/recordio")
		req.Header.Set("Authorization", "Bearer "+bearer)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := h1Client.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		leaks.saw("an egress answer", fmt.Sprint(resp.Header)+"\n"+string(out))
		return resp.StatusCode, resp.Header, string(out)
	}

	jwt := token()
	if code, _, out := post("r", jwt); code != http.StatusOK {
		t.Fatalf("the JWT on its route: %d %s", code, out)
	}
	if code, _, out := post("other", jwt); code != http.StatusForbidden || !strings.Contains(out, `svc-publisher`) || !strings.Contains(out, "corp-idp") {
		t.Fatalf("the JWT on a route it is not granted: %d %s, want 403 naming its subject", code, out)
	}
	if code, _, out := get("/v1/streams/s", jwt); code != http.StatusForbidden || !strings.Contains(out, `svc-publisher`) {
		t.Fatalf("the JWT on a stream it may not read: %d %s, want 403 naming its subject", code, out)
	}
	if code, _, out := post("other", "static-e2e-token"); code != http.StatusOK {
		t.Fatalf("the static token beside the issuer: %d %s", code, out)
	}
	// Each token the issue lists as refused: 401 with an RFC 6750 challenge saying
	// invalid_token and why, on ingress and on egress.
	good := func() map[string]any {
		c := idp.Claims("svc-publisher", "recordio-bridge", time.Minute)
		c["scope"] = "publish:r read:s"
		return c
	}
	with := func(k string, v any) map[string]any { c := good(); c[k] = v; return c }
	sign := func(c map[string]any) string {
		tok, err := idp.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	badSig, err := oidctest.SignWith(stranger, idp.KeyID(), jose.RS256, good())
	if err != nil {
		t.Fatal(err)
	}
	// The classic confusion: HS256 keyed with the issuer's public key, which anyone
	// can read from its JWKS.
	hsPub, err := oidctest.SignWith(idp.PublicKeyPEM(), idp.KeyID(), jose.HS256, good())
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(good())
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64(claims) + "."
	refused := []struct{ name, bearer, want string }{
		{"expired", sign(with("exp", time.Now().Add(-5*time.Minute).Unix())), "expired"},
		{"another audience", sign(with("aud", "someone-else")), "not for audience recordio-bridge"},
		{"another issuer", sign(with("iss", "https://evil.example")), `issuer 'https://evil.example' is not trusted`},
		{"a signature by a key the issuer does not publish", badSig, "signature not verified"},
		{"alg none", none, "accepted algorithm"},
		{"HS256 keyed with the issuer's public key", hsPub, "accepted algorithm"},
	}
	checkRefused := func(name, bearer, want string, code int, hdr http.Header, out string) {
		t.Helper()
		ch := hdr.Get("WWW-Authenticate")
		if code != http.StatusUnauthorized || !strings.HasPrefix(ch, "Bearer ") || !strings.Contains(ch, `error="invalid_token"`) ||
			!strings.Contains(ch, `error_description="`) || !strings.Contains(ch, want) {
			t.Fatalf("%s: %d, WWW-Authenticate %q, body %s; want 401 invalid_token saying %q", name, code, ch, out, want)
		}
		leaks.secret("a refused JWT ("+name+")", bearer)
	}
	for _, c := range refused {
		code, hdr, out := post("r", c.bearer)
		checkRefused(c.name, c.bearer, c.want, code, hdr, out)
		code, hdr, out = get("/v1/streams/s", c.bearer)
		checkRefused(c.name+" on egress", c.bearer, c.want, code, hdr, out)
	}
	if code, hdr, _ := post("r", ""); code != http.StatusUnauthorized || strings.Contains(hdr.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("no token: %d %q", code, hdr.Get("WWW-Authenticate"))
	}

	// The provider rotates its key, dropping the old one: the next token names a key
	// id the bridge has not seen, which it fetches (its key set is older than its
	// keyRefreshInterval); a token of the dropped key is refused.
	if err := idp.Rotate(false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	rotated := token()
	if code, _, out := post("r", rotated); code != http.StatusOK {
		t.Fatalf("a token of the rotated key: %d %s", code, out)
	}
	code, hdr, out := post("r", jwt)
	checkRefused("a token of the dropped key", jwt, "signature not verified", code, hdr, out)
	leaks.secret("a JWT the provider issued", rotated)
	leaks.secret("a JWT the provider issued", jwt)
	leaks.secret("the client secret", secret)
	leaks.secret("the static token", "static-e2e-token")
	leaks.sawGet(t, "/metrics", p.OpsURL+"/metrics")
	leaks.saw("the bridge's output", p.logs.String())
	n, secrets := leaks.check(t)
	if n == 0 || secrets < 10 {
		t.Fatalf("searched %d bytes for %d secrets: nothing collected", n, secrets)
	}
	t.Logf("%d forged or foreign tokens refused on ingress and egress, and the dropped key's; searched %d bytes of answers, output and metrics for %d secrets", len(refused), n, secrets)
}
