package app

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestCreationRefusedByAuthenticationIsUnavailableAndReadyzSaysWhy: a broker that
// refuses the bridge's credentials for a while (an OpenID broker restarted before it
// can reach its identity provider) makes a new topic's producer creation fail: the
// record gets 503 with Retry-After (resend it: the broker may accept the same
// credentials a moment later), and /readyz names the refusal while it lasts and drops
// it once a handshake is accepted again. Any handshake failure was taken for a refusal
// for good: the record got 502, which a client skips and never resends.
func TestCreationRefusedByAuthenticationIsUnavailableAndReadyzSaysWhy(t *testing.T) {
	var refusing atomic.Bool
	b, err := pulsartest.NewBroker(pulsartest.WithAuthenticator(func(method string, data []byte) error {
		if method != "token" || string(data) != "t0ken" {
			return errors.New("bad token")
		}
		if refusing.Load() {
			return errors.New("could not fetch the issuer's JWKS")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bridge.yaml")
	writeConfig(t, path, b.URL()+"\n  token: file:"+filepath.Join(dir, "token")+"\n  operationTimeout: 1s", "")
	a, err := New(Options{ConfigPath: path, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	ops := a.opsHandler()
	if code, body := get(t, ops, "/readyz"); code != http.StatusOK || body["brokerHandshakeRefused"] != nil {
		t.Fatalf("/readyz before the refusal: %d %v", code, body)
	}

	refusing.Store(true)
	b.DropConnections()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func() (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.DataAddr().String()+"/v1/publish/r",
			bytes.NewReader(recordio.AppendRecord(nil, []byte(`{"k":"v"}`))))
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	resp, body := post()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "AuthenticationError") {
		t.Fatalf("a record whose producer's creation the broker's authentication refused: %d (Retry-After %q) %s; want 503 with Retry-After naming the refusal",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	code, rz := get(t, ops, "/readyz")
	refusals, _ := rz["brokerHandshakeRefused"].([]any)
	if code != http.StatusServiceUnavailable || len(refusals) != 1 || !strings.Contains(rz["broker"].(string), "refusing the bridge's credentials") ||
		!strings.Contains(refusals[0].(map[string]any)["error"].(string), "JWKS") {
		t.Fatalf("/readyz while the broker refuses the credentials: %d %v", code, rz)
	}

	refusing.Store(false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, body = post()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("once the broker accepts the credentials again: %d %s", resp.StatusCode, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, rz := get(t, ops, "/readyz"); code != http.StatusOK || rz["brokerHandshakeRefused"] != nil {
		t.Fatalf("/readyz once the broker accepts the credentials again: %d %v", code, rz)
	}
	if n := len(b.Messages("persistent://public/default/t")); n != 1 {
		t.Fatalf("%d messages stored, want the one accepted", n)
	}
}
