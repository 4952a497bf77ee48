package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestJWTsFromAnOpenIDProviderAuthorizeIngressBesideStaticTokens runs the bridge with
// auth.jwt trusting a real OpenID provider (discovery, JWKS, client credentials) and one
// static token: a client-credentials token publishes to the route its scope grants, is
// refused another with 403 naming its subject, an expired or foreign token is 401
// invalid_token saying why, and after the provider rotates its key the next token works.
func TestJWTsFromAnOpenIDProviderAuthorizeIngressBesideStaticTokens(t *testing.T) {
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
routes:
  - name: r
    default: {topic: %s}
  - name: other
    default: {topic: %s}
`, b.URL, hex.EncodeToString(static[:]), idp.Issuer(), topic, other))

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
		return code, hdr, string(out)
	}

	jwt := token()
	if code, _, out := post("r", jwt); code != http.StatusOK {
		t.Fatalf("the JWT on its route: %d %s", code, out)
	}
	if code, _, out := post("other", jwt); code != http.StatusForbidden || !strings.Contains(out, `svc-publisher`) || !strings.Contains(out, "corp-idp") {
		t.Fatalf("the JWT on a route it is not granted: %d %s, want 403 naming its subject", code, out)
	}
	if code, _, out := post("other", "static-e2e-token"); code != http.StatusOK {
		t.Fatalf("the static token beside the issuer: %d %s", code, out)
	}
	expired, err := idp.Sign(map[string]any{"iss": idp.Issuer(), "sub": "svc-publisher", "aud": "recordio-bridge", "scope": "publish:r",
		"exp": time.Now().Add(-5 * time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	foreignAud, _ := idp.Sign(idp.Claims("svc-publisher", "someone-else", time.Minute))
	for _, c := range []struct{ name, bearer, want string }{
		{"expired", expired, "expired"},
		{"another audience", foreignAud, "audience"},
	} {
		code, hdr, out := post("r", c.bearer)
		ch := hdr.Get("WWW-Authenticate")
		if code != http.StatusUnauthorized || !strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, c.want) {
			t.Fatalf("%s: %d, WWW-Authenticate %q, body %s", c.name, code, ch, out)
		}
	}
	if code, hdr, _ := post("r", ""); code != http.StatusUnauthorized || strings.Contains(hdr.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("no token: %d %q", code, hdr.Get("WWW-Authenticate"))
	}

	// The provider rotates its key, dropping the old one: the next token names a key
	// id the bridge has not seen, which it fetches.
	if err := idp.Rotate(false); err != nil {
		t.Fatal(err)
	}
	if code, _, out := post("r", token()); code != http.StatusOK {
		t.Fatalf("a token of the rotated key: %d %s", code, out)
	}
	if code, _, _ := post("r", jwt); code != http.StatusUnauthorized {
		t.Fatalf("a token of the dropped key: %d, want 401", code)
	}
	logs := p.logs.String()
	for _, s := range []string{secret, "static-e2e-token", "eyJ"} {
		if strings.Contains(logs, s) {
			t.Fatalf("the bridge's output shows a secret (%.8s...)", s)
		}
	}
}
