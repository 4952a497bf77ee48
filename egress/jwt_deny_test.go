package egress

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/oidctest"
)

// A stream's 401 for a JWT that does not verify says why as RFC 6750 asks
// (error="invalid_token" and its description), as ingress's does; a valid token
// without the stream's grant is 403 naming its subject.
func TestEgressRefusesAnInvalidJWTAsInvalidTokenAndAnUngrantedOneAs403(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := &fakeSub{feed: make(chan *Delivery, 1)}
	url := serveStreams(t, f, "auth:\n  jwt:\n    - name: idp\n      issuer: "+p.Issuer()+"\n      audience: recordio-bridge\n"+
		"streams:\n  - name: s\n    topics: [t]\n")
	get := func(tok string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
		req.Header.Set("Accept", "application/recordio")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b.String()
	}
	expired := p.Claims("team-a", "recordio-bridge", -time.Hour)
	expired["scope"] = "read:s"
	tok, err := p.Sign(expired)
	if err != nil {
		t.Fatal(err)
	}
	if code, ch, _ := get(tok); code != http.StatusUnauthorized || !strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, "error_description=") {
		t.Fatalf("an expired token: %d, WWW-Authenticate %q; want 401 with error=\"invalid_token\" and its description", code, ch)
	}
	other := p.Claims("team-b", "recordio-bridge", time.Hour)
	other["scope"] = "read:elsewhere"
	tok, err = p.Sign(other)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(tok); code != http.StatusForbidden || !strings.Contains(body, "team-b") {
		t.Fatalf("a token without the grant: %d %q; want 403 naming its subject", code, body)
	}
}

// A token that cannot be judged because the identity provider is unreachable is
// answered 503 with Retry-After, as ingress answers it: no challenge, nothing of the
// provider's URL or connection error.
func TestEgressAnswersAnUnreachableIdentityProviderWith503(t *testing.T) {
	p, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := &fakeSub{feed: make(chan *Delivery, 1)}
	url := serveStreams(t, f, "auth:\n  jwt:\n    - name: idp\n      issuer: "+p.Issuer()+"\n      audience: recordio-bridge\n"+
		"streams:\n  - name: s\n    topics: [t]\n")
	c := p.Claims("team-a", "recordio-bridge", time.Hour)
	c["scope"] = "read:s"
	tok, err := p.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	for _, r := range []struct{ method, path string }{{http.MethodGet, "/v1/streams/s"}, {http.MethodPost, "/v1/streams/s/ack"}} {
		req, _ := http.NewRequest(r.method, url+r.path, nil)
		req.Header.Set("Accept", "application/recordio")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		host := strings.TrimPrefix(p.Issuer(), "http://")
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("WWW-Authenticate") != "" || strings.Contains(string(b), host) {
			t.Fatalf("%s %s, provider down: %d, Retry-After %q, WWW-Authenticate %q, body %s; want 503 with Retry-After, no challenge, nothing internal",
				r.method, r.path, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"), b)
		}
	}
}
