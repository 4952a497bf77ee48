package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

func oauth2App(t *testing.T, p *oidctest.Provider, secret string, log *slog.Logger) (*App, error) {
	t.Helper()
	return oauth2AppWith(t, p, secret, "", log)
}

// oauth2AppWith is oauth2App with extra keys under pulsar.oauth2 (indented by four spaces).
func oauth2AppWith(t *testing.T, p *oidctest.Provider, secret, extra string, log *slog.Logger) (*App, error) {
	t.Helper()
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dir := t.TempDir()
	key := filepath.Join(dir, "oauth2.json")
	if err := os.WriteFile(key, []byte(fmt.Sprintf(`{"client_id": "bridge", "client_secret": %q}`, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bridge.yaml")
	cfg := fmt.Sprintf("listen:\n  data: 127.0.0.1:0\n  ops: localhost:0\npulsar:\n  url: %s\n  oauth2:\n    issuerUrl: %s/\n    privateKey: file:%s\n    audience: urn:pulsar:test\n%sroutes:\n  - name: r\n    default: {topic: t}\n",
		b.URL(), p.Issuer(), key, extra)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{ConfigPath: path, Version: "test", Logger: log})
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Shutdown(ctx)
		})
	}
	return a, err
}

func TestReadyzIsUnreadyOnlyOnceNoValidOAuth2TokenIsLeftAndReadyAgainWhenTheProviderIsBack(t *testing.T) {
	const secret = "app-s3cr3t-77"
	p, err := oidctest.New(oidctest.Options{Lifetime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.AddClient("bridge", oidctest.Client{Secret: secret})
	var logs logbuf.Buffer
	a, err := oauth2App(t, p, secret, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ops := a.opsHandler()
	if code, body := get(t, ops, "/readyz"); code != http.StatusOK || !strings.HasPrefix(fmt.Sprint(body["pulsarAuth"]), "OAuth2 token valid until") {
		t.Fatalf("/readyz %d %v", code, body)
	}
	expiry, _ := a.oauth2.Status()
	p.SetDown(true)
	if code, body := get(t, ops, "/readyz"); time.Now().Before(expiry) && code != http.StatusOK {
		t.Fatalf("/readyz %d %v while the token is still valid", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, ops, "/readyz")
		if code == http.StatusServiceUnavailable {
			if r := fmt.Sprint(body["pulsarAuth"]); !strings.Contains(r, "no valid OAuth2 token") || !strings.Contains(r, "503") {
				t.Fatalf("/readyz reason %q", r)
			}
			if time.Now().Before(expiry) {
				t.Fatalf("unready at %v before the token expired at %v", time.Now(), expiry)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %v", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.SetDown(false)
	for code, body := get(t, ops, "/readyz"); code != http.StatusOK; code, body = get(t, ops, "/readyz") {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("/readyz still %d %v after the provider came back", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the log shows the client secret")
	}
	if !strings.Contains(logs.String(), "refreshing the OAuth2 token failed") {
		t.Fatalf("the outage was not logged:\n%s", logs.String())
	}
}

func TestWrongOAuth2CredentialsFailStartUpNamingTheIssuerAndTheAnswer(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.AddClient("bridge", oidctest.Client{Secret: "the-right-one"})
	_, err = oauth2App(t, p, "the-wrong-one", nil)
	if err == nil || !strings.Contains(err.Error(), "pulsar.oauth2") || !strings.Contains(err.Error(), p.Issuer()) || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("New: %v", err)
	}
	if strings.Contains(err.Error(), "the-wrong-one") || strings.Contains(err.Error(), "the-right-one") {
		t.Fatalf("New: %v shows a secret", err)
	}
}

func TestAnOAuth2IssuerOverHTTPSWithAPrivateCAIsTrustedThroughItsCAFile(t *testing.T) {
	const secret = "ca-s3cr3t-31"
	p, err := oidctest.New(oidctest.Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.AddClient("bridge", oidctest.Client{Secret: secret})
	// The system roots do not know the provider's CA: start-up fails naming the issuer.
	_, err = oauth2App(t, p, secret, nil)
	if err == nil || !strings.Contains(err.Error(), p.Issuer()) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("New without caFile: %v", err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, p.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := oauth2AppWith(t, p, secret, "    caFile: "+caFile+"\n", nil)
	if err != nil {
		t.Fatalf("New with caFile: %v", err)
	}
	if code, body := get(t, a.opsHandler(), "/readyz"); code != http.StatusOK || !strings.HasPrefix(fmt.Sprint(body["pulsarAuth"]), "OAuth2 token valid until") {
		t.Fatalf("/readyz %d %v", code, body)
	}
	if p.TokenCalls() != 1 {
		t.Fatalf("%d tokens issued, want 1", p.TokenCalls())
	}
}

// TestARotatedOAuth2CredentialsFileIsUsedOnTheNextTokenRequest: the client secret is
// rotated (the provider refuses the old one; the privateKey file holds the new one):
// the bridge's next token request sends the new secret and its token stays valid. A
// file then left unusable is refused, counted in bridge_credentials_refused_total and
// logged without its content, and the last credentials keep working.
func TestARotatedOAuth2CredentialsFileIsUsedOnTheNextTokenRequest(t *testing.T) {
	const secret, rotated = "app-s3cr3t-41", "app-r0tated-s3cret-97"
	p, err := oidctest.New(oidctest.Options{Lifetime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.AddClient("bridge", oidctest.Client{Secret: secret})
	var logs logbuf.Buffer
	a, err := oauth2App(t, p, secret, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	key := a.snap.Load().cfg.Pulsar.OAuth2.PrivateKey.File()
	replace := func(content string) {
		t.Helper()
		if err := os.WriteFile(key+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(key+".tmp", key); err != nil {
			t.Fatal(err)
		}
	}
	p.AddClient("bridge", oidctest.Client{Secret: rotated})
	replace(fmt.Sprintf(`{"client_id": "bridge", "client_secret": %q}`, rotated))
	failed := p.FailedCalls()
	waitIssued := func(what string) {
		t.Helper()
		n := len(p.Issued())
		deadline := time.Now().Add(5 * time.Second)
		for len(p.Issued()) < n+2 {
			if time.Now().After(deadline) {
				t.Fatalf("not two tokens issued within 5 s %s (%d requests refused)", what, p.FailedCalls()-failed)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitIssued("after the secret was rotated")
	const half = `{"client_id": "bridge", "client_sec`
	replace(half)
	waitIssued("with the file half-written")
	if n := p.FailedCalls() - failed; n != 0 {
		t.Fatalf("%d token requests refused: the rotated secret was not the one sent", n)
	}
	if _, err := a.oauth2.Status(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.opsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `bridge_credentials_refused_total{file="pulsar_oauth2"}`) {
		t.Fatalf("the refused file is not counted:\n%s", rec.Body.String())
	}
	if l := logs.String(); !strings.Contains(l, "OAuth2 credentials not reloaded") || strings.Contains(l, half) || strings.Contains(l, rotated) {
		t.Fatalf("the refusal is not logged, or the log shows the file:\n%s", l)
	}
}
