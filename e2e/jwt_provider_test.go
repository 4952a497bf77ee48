package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestAnIssuerEndingWithASlashIsTrustedForgedKeyIDsDoNotHammerItAndAnUnreachableOneIs503 runs
// the bridge with two issuers: one whose iss ends with "/" (as Auth0's, Okta's and Azure
// AD v1's do), whose tokens publish; 50 tokens of forged key ids, each 401, fetch its
// key set at most once and are counted as refused refreshes; and one that is down,
// whose tokens are answered 503 with Retry-After and nothing internal (the provider's
// URL and error are in the log and /readyz), until it is back.
func TestAnIssuerEndingWithASlashIsTrustedForgedKeyIDsDoNotHammerItAndAnUnreachableOneIs503(t *testing.T) {
	b := broker.Get(t)
	idp, err := oidctest.New(oidctest.Options{TrailingSlash: true})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	down, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	down.Stop()
	topic := b.Topic(t, "jwt-slash")
	p := startBridge(t, fmt.Sprintf(`pulsar:
  url: %s
auth:
  jwt:
    - name: slash-idp
      issuer: %s
      audience: recordio-bridge
    - name: down-idp
      issuer: %s
      audience: recordio-bridge
routes:
  - name: r
    default: {topic: %s}
`, b.URL, idp.Issuer(), down.Issuer(), topic))
	if !strings.HasSuffix(idp.Issuer(), "/") {
		t.Fatalf("issuer %s", idp.Issuer())
	}
	body := recordio.AppendRecord(nil, rec(1))
	post := func(bearer string) (int, http.Header, string) {
		code, hdr, out := postOne(t, p.DataURL+"/v1/publish/r", map[string]string{"Content-Type": "application/recordio",
			"Message-Content-Type": "application/json", "Authorization": "Bearer " + bearer}, body)
		return code, hdr, string(out)
	}
	claims := func(issuer *oidctest.Provider) map[string]any {
		c := issuer.Claims("svc", "recordio-bridge", time.Minute)
		c["scope"] = "publish:r"
		return c
	}
	tok, err := idp.Sign(claims(idp))
	if err != nil {
		t.Fatal(err)
	}
	if code, hdr, out := post(tok); code != http.StatusOK {
		t.Fatalf("a token of issuer %s: %d %s %q", idp.Issuer(), code, out, hdr.Get("WWW-Authenticate"))
	}

	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for i := range 50 {
		forged, err := oidctest.SignWith(stranger, fmt.Sprintf("forged-%d", i), jose.ES256, claims(idp))
		if err != nil {
			t.Fatal(err)
		}
		if code, _, out := post(forged); code != http.StatusUnauthorized {
			t.Fatalf("forged token %d: %d %s, want 401", i, code, out)
		}
	}
	if n := idp.JWKSCalls(); n != 1 {
		t.Fatalf("the key set was fetched %d times for one token and 50 forged ones within the refresh interval, want once", n)
	}
	series := `bridge_auth_jwks_refresh_refused_total{issuer="` + idp.Issuer() + `"}`
	if v := metricValue(t, scrape(t, p.OpsURL), series); v != 50 {
		t.Fatalf("%s = %v, want 50", series, v)
	}

	dtok, err := down.Sign(claims(down))
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(down.Issuer(), "http://")
	code, hdr, out := post(dtok)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || hdr.Get("WWW-Authenticate") != "" ||
		strings.Contains(out, host) || strings.Contains(fmt.Sprint(hdr), host) {
		t.Fatalf("a token of an unreachable provider: %d, headers %v, body %s; want 503 with Retry-After, no challenge, nothing of %s", code, hdr, out, host)
	}
	rz := p.readyz(t)
	idps, _ := rz["identityProviders"].(map[string]any)
	if d, _ := idps["down-idp"].(string); !strings.Contains(d, host) {
		t.Fatalf("/readyz: %v, want identityProviders naming down-idp and its URL", rz)
	}
	if _, ok := idps["slash-idp"]; ok {
		t.Fatalf("/readyz names the reachable issuer: %v", idps)
	}
	if !strings.Contains(p.logs.String(), "identity provider unreachable") || !strings.Contains(p.logs.String(), host) {
		t.Fatalf("the log does not say the provider is unreachable, with its URL:\n%s", tail(p.logs.String(), 20))
	}

	// Back up: its tokens are judged again (the next attempt, a second after the last).
	if err := down.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		code, _, out = post(dtok)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || ctx.Err() != nil {
			t.Fatalf("a token of the provider back up: %d %s", code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, ok := p.readyz(t)["identityProviders"]; ok {
		t.Fatalf("/readyz still names an unreachable provider: %v", p.readyz(t))
	}
}
