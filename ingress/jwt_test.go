package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/mapping"
)

// serveAuth serves one route r behind doc's auth section.
func serveAuth(t *testing.T, auth string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(auth + oneRoute))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := admission.Compile(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	s, url := serve(t, &fakePublisher{}, tab, limits)
	s.Update(tab, tokens, limits)
	return url
}

func postWithToken(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func jwtAuth(p *oidctest.Provider) string {
	return "auth:\n  jwt:\n    - name: idp\n      issuer: " + p.Issuer() + "\n      audience: recordio-bridge\n"
}

// A token that cannot be judged because the identity provider is unreachable is the
// bridge's problem: 503 with Retry-After, no challenge, and nothing of the provider's
// URL or connection error in the answer.
func TestIngressAnswersAnUnreachableIdentityProviderWith503(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	url := serveAuth(t, jwtAuth(p))
	c := p.Claims("svc", "recordio-bridge", time.Hour)
	c["scope"] = "publish:r"
	tok, err := p.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	resp, body := postWithToken(t, url, tok)
	host := strings.TrimPrefix(p.Issuer(), "http://")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("WWW-Authenticate") != "" || strings.Contains(body, host) || strings.Contains(body, "refused") {
		t.Fatalf("provider down: %d, Retry-After %q, WWW-Authenticate %q, body %s; want 503 with Retry-After, no challenge, nothing internal",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"), body)
	}
}

// Each request verifies its token once (a valid one as a forged one): a forged token
// (a key id the issuer does not publish) is refused a refresh of the key set once per
// request, and 50 of them fetch the key set at most once.
func TestIngressVerifiesAForgedTokenOncePerRequest(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	url := serveAuth(t, jwtAuth(p))
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := p.Claims("svc", "recordio-bridge", time.Hour)
	c["scope"] = "publish:r"
	for i := range 50 {
		forged, err := oidctest.SignWith(stranger, fmt.Sprintf("forged-%d", i), jose.ES256, c)
		if err != nil {
			t.Fatal(err)
		}
		if resp, body := postWithToken(t, url, forged); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("forged token %d: %d %s, want 401", i, resp.StatusCode, body)
		}
	}
	refused, _ := keyStats(p.Issuer())
	if n := p.JWKSCalls(); n > 1 || refused != 50 {
		t.Fatalf("50 forged requests: %d JWKS fetches, %d refreshes refused; want at most 1 fetch and 1 refusal per request", n, refused)
	}
	tok, err := p.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	_, before := keyStats(p.Issuer())
	if resp, body := postWithToken(t, url, tok); resp.StatusCode != http.StatusOK {
		t.Fatalf("a valid token: %d %s", resp.StatusCode, body)
	}
	if _, after := keyStats(p.Issuer()); after-before != 1 {
		t.Fatalf("a request with a valid token verified it %d times, want once", after-before)
	}
}

// keyStats is what the key set of issuer counted: refreshes refused, verifications.
func keyStats(issuer string) (refused, verified int64) {
	for _, s := range admission.JWKSStats() {
		if s.Issuer == issuer {
			refused += s.RefreshesRefused
			verified += s.Verifications
		}
	}
	return refused, verified
}
