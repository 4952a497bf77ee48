package oauth2_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/pulsar/oauth2"
)

// TestARotatedClientSecretIsUsedOnTheNextTokenRequest: the credentials file is read
// again before every token request. The secret is rotated (the provider refuses the
// old one from then on, the file holds the new one): the next refresh succeeds with
// it. A file that is then half-written is refused, reported, and the last credentials
// keep working.
func TestARotatedClientSecretIsUsedOnTheNextTokenRequest(t *testing.T) {
	p := provider(t, time.Second) // refreshed after 0.9 s
	file := filepath.Join(t.TempDir(), "credentials.json")
	write := func(content string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"client_id": "bridge", "client_secret": "` + secret + `"}`)
	var refused atomic.Int32
	s, err := oauth2.New(context.Background(), oauth2.Options{IssuerURL: p.Issuer() + "/", HTTPClient: p.HTTPClient(),
		Credentials: func() (oauth2.KeyFile, error) {
			b, err := os.ReadFile(file)
			if err != nil {
				return oauth2.KeyFile{}, err
			}
			return oauth2.ParseKeyFile(b)
		},
		CredentialsRefused: func(error) { refused.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const rotated = "r0tated-s3cret-8812"
	p.AddClient("bridge", oidctest.Client{Secret: rotated})
	write(`{"client_id": "bridge", "client_secret": "` + rotated + `"}`)
	issued, failed := len(p.Issued()), p.FailedCalls()
	waitWithin(t, 5*time.Second, "two tokens issued with the rotated secret", func() bool { return len(p.Issued()) >= issued+2 })
	if p.FailedCalls() != failed {
		t.Fatalf("%d token requests refused after the rotation: the old secret was sent", p.FailedCalls()-failed)
	}

	write(`{"client_id": "bridge", "client_sec`)
	issued = len(p.Issued())
	waitWithin(t, 5*time.Second, "two tokens issued with the last good credentials", func() bool { return len(p.Issued()) >= issued+2 })
	if refused.Load() == 0 || p.FailedCalls() != failed {
		t.Fatalf("a half-written file: %d refusals reported, %d token requests refused; want some and none", refused.Load(), p.FailedCalls()-failed)
	}
	if _, err := s.Status(); err != nil {
		t.Fatal(err)
	}
}

func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
