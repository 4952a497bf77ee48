package oauth2_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/internal/backoff"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/oauth2"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "s3cr3t-Vq9xZ"

func provider(t *testing.T, lifetime time.Duration) *oidctest.Provider {
	t.Helper()
	p, err := oidctest.New(oidctest.Options{Lifetime: lifetime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.AddClient("bridge", oidctest.Client{Secret: secret})
	return p
}

func source(t *testing.T, p *oidctest.Provider, o oauth2.Options) *oauth2.Source {
	t.Helper()
	o.IssuerURL, o.HTTPClient = p.Issuer()+"/", p.HTTPClient()
	if o.ClientID == "" {
		o.ClientID, o.ClientSecret = "bridge", secret
	}
	s, err := oauth2.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewRefusesWrongCredentialsNamingTheIssuerAndTheAnswerButNotTheSecret(t *testing.T) {
	p := provider(t, time.Hour)
	wrong := "wrong-" + secret
	_, err := oauth2.New(context.Background(), oauth2.Options{IssuerURL: p.Issuer(), ClientID: "bridge", ClientSecret: wrong, HTTPClient: p.HTTPClient()})
	if !errors.Is(err, oauth2.ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	msg := err.Error()
	for _, want := range []string{p.Issuer(), "401", "invalid_client", "client authentication failed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, secret) {
		t.Errorf("error %q shows the secret", msg)
	}
}

func TestNewFailsOnAnIssuerWithoutDiscovery(t *testing.T) {
	p := provider(t, time.Hour)
	_, err := oauth2.New(context.Background(), oauth2.Options{IssuerURL: p.Issuer() + "/nothing-here", ClientID: "bridge", ClientSecret: secret, HTTPClient: p.HTTPClient()})
	if !errors.Is(err, oauth2.ErrIssuer) || !strings.Contains(err.Error(), "/nothing-here/.well-known/openid-configuration") {
		t.Fatalf("err = %v, want ErrIssuer naming the discovery URL", err)
	}
}

func TestTheTokenIsReplacedBeforeItExpiresAndNeverMissing(t *testing.T) {
	p := provider(t, 2*time.Second)
	s := source(t, p, oauth2.Options{RefreshAfter: 0.5})
	seen := map[string]bool{}
	for len(seen) < 3 {
		tok, err := s.Data()
		if err != nil {
			t.Fatalf("after %d tokens: %v", len(seen), err)
		}
		seen[string(tok)] = true
		time.Sleep(10 * time.Millisecond)
	}
	if f := p.FailedCalls(); f != 0 {
		t.Fatalf("%d failed token requests", f)
	}
}

func TestAnOutageKeepsTheTokenUntilItExpiresThenRetriesUntilTheProviderIsBack(t *testing.T) {
	p := provider(t, 3*time.Second)
	s := source(t, p, oauth2.Options{RefreshAfter: 0.1, Retry: backoff.Schedule{Initial: 20 * time.Millisecond, Multiplier: 2, Jitter: 0.2, Max: 100 * time.Millisecond}})
	first, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	expiry, err := s.Status()
	if err != nil || expiry.IsZero() {
		t.Fatalf("Status: %v, %v", expiry, err)
	}
	p.SetDown(true)
	// Refreshes fail from 0.3 s on; the token fetched before stays in use meanwhile.
	waitFor(t, "refreshes to fail", func() bool { return p.FailedCalls() >= 3 })
	if time.Now().Before(expiry) {
		tok, err := s.Data()
		if err != nil && time.Now().Before(expiry) {
			t.Fatalf("the valid token was dropped during the outage: %v", err)
		}
		if err == nil && string(tok) != string(first) {
			t.Fatal("a new token while the provider is down")
		}
	}
	waitFor(t, "the token to expire", func() bool { return time.Now().After(expiry.Add(50 * time.Millisecond)) })
	_, err = s.Data()
	if !errors.Is(err, oauth2.ErrNoToken) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), p.Issuer()) {
		t.Fatalf("Data after expiry: %v, want ErrNoToken naming the issuer and its 503", err)
	}
	if _, err := s.Status(); !errors.Is(err, oauth2.ErrNoToken) {
		t.Fatalf("Status after expiry: %v", err)
	}
	p.SetDown(false)
	waitFor(t, "a new token", func() bool { _, err := s.Status(); return err == nil })
	tok, err := s.Data()
	if err != nil || string(tok) == string(first) {
		t.Fatalf("after the outage: %v (same token: %v)", err, string(tok) == string(first))
	}
}

// verifier checks tokens as a broker's OpenID provider does: signature by the issuer's
// JWKS (fetched again for an unknown key id), issuer, audience, expiry.
func verifier(t *testing.T, p *oidctest.Provider, audience string) func(method string, data []byte) error {
	ctx := oidc.ClientContext(context.Background(), p.HTTPClient())
	op, err := oidc.NewProvider(ctx, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	v := op.Verifier(&oidc.Config{ClientID: audience})
	var mu sync.Mutex
	return func(method string, data []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if method != "token" {
			return fmt.Errorf("auth method %q, want token", method)
		}
		_, err := v.Verify(ctx, string(data))
		return err
	}
}

func TestTheTokenAuthenticatesConnectAndAnswersChallengesAfterAKeyRotation(t *testing.T) {
	p := provider(t, 5*time.Second) // long enough that a loaded machine does not see it expire between Data and the broker's check
	b, err := pulsartest.NewBroker(pulsartest.WithAuthenticator(verifier(t, p, "urn:pulsar:test")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := source(t, p, oauth2.Options{Audience: "urn:pulsar:test"})
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), Auth: s})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pr, err := c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m0")}); err != nil {
		t.Fatal(err)
	}
	first, _ := s.Data()
	if cc := b.ConnectCredentials(); len(cc) != 1 || cc[0].Method != "token" || cc[0].Data != string(first) {
		t.Fatalf("CONNECT carried %+v, want the method token and the current access token", cc)
	}

	// The provider rotates its key: the next token is signed by a key the broker has
	// not seen, and the challenge's answer carries it on the same connection.
	if err := p.Rotate(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a token signed by the new key", func() bool { d, _ := s.Data(); return string(d) != string(first) })
	b.ChallengeAuth()
	waitFor(t, "the AUTH_RESPONSE", func() bool { return len(b.AuthResponses()) == 1 })
	if got, _ := s.Data(); b.AuthResponses()[0] != string(got) {
		t.Fatal("AUTH_RESPONSE did not carry the current token")
	}
	if _, err := pr.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m1")}); err != nil {
		t.Fatal(err)
	}
	if n := len(b.ConnectCredentials()); n != 1 {
		t.Fatalf("%d CONNECTs: the accepted answer must keep the connection", n)
	}
}

func TestNoValidTokenFailsNewConnectionsAsTemporary(t *testing.T) {
	p := provider(t, time.Second)
	b, err := pulsartest.NewBroker(pulsartest.WithAuthenticator(verifier(t, p, "urn:pulsar:test")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := source(t, p, oauth2.Options{Audience: "urn:pulsar:test", Retry: backoff.Schedule{Initial: time.Hour, Multiplier: 1, Max: time.Hour}})
	p.SetDown(true)
	waitFor(t, "the token to expire", func() bool { _, err := s.Status(); return err != nil })
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), Auth: s, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "t"})
	if !errors.Is(err, pulsar.ErrCredentials) || errors.Is(err, pulsar.ErrHandshake) || !errors.Is(err, oauth2.ErrNoToken) {
		t.Fatalf("err = %v, want ErrCredentials (temporary) wrapping ErrNoToken, not ErrHandshake", err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("the error shows the secret")
	}
}
