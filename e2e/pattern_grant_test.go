package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/internal/oidctest"
)

// TestPatternStreamWithoutTheNamespaceGrantSaysWhichGrant: on a broker that authorises
// every client, a role granted consume on the topics alone cannot list their namespace,
// which a topicsPattern stream needs: the GET is refused with 502 naming the namespace
// and the grant; once the role has the namespace-level grant, the same stream reads.
func TestPatternStreamWithoutTheNamespaceGrantSaysWhichGrant(t *testing.T) {
	ab := startAuthBroker(t)
	key, err := os.ReadFile(filepath.Join(ab.state, "auth", "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := oidctest.SignWith(key, "", jose.HS256, map[string]any{"sub": "pattern-reader"})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	const topic = "persistent://auth/allowed/orders-granted"
	ab.admin(t, http.MethodPut, "/admin/v2/persistent/auth/allowed/orders-granted", "")
	ab.admin(t, http.MethodPost, "/admin/v2/persistent/auth/allowed/orders-granted/permissions/pattern-reader", `["consume"]`)
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
  token: file:%s
streams:
  - name: pat
    topicsPattern: persistent://auth/allowed/orders-.*
    position: earliest
  - name: one
    topics: [%s]
`, ab.url, tokenFile, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The topic's own grant is enough for a stream of the topic...
	one := egressGet(t, ctx, p.DataURL+"/v1/streams/one", nil)
	one.Body.Close()
	if one.StatusCode != 200 {
		t.Fatalf("a stream of the granted topic: %s", one.Status)
	}
	// ...not for a pattern, which lists the namespace.
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/pat", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a pattern stream without the namespace grant: %s %s; want 502", resp.Status, body)
	}
	for _, want := range []string{"auth/allowed", "namespace-level grant", "AuthorizationError"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("the refusal %s does not say %q", body, want)
		}
	}
	t.Logf("without the namespace grant: %s %s", resp.Status, strings.TrimSpace(string(body)))
	ab.admin(t, http.MethodPost, "/admin/v2/namespaces/auth/allowed/permissions/pattern-reader", `["consume"]`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/pat", nil)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the namespace grant, the pattern stream still answers %s", resp.Status)
		}
		time.Sleep(time.Second)
	}
}
