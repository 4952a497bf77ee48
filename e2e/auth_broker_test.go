package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/oidctest"
)

// authBroker is an Apache Pulsar standalone of its own (not the shared one), on its own
// ports and state directory, with authentication and authorisation on: a token provider
// for the superuser (admin calls, the broker's own client), the OpenID provider trusting
// idp (the tests' identity provider, over http), and the TLS provider for client
// certificates. Roles are granted on tenant auth's namespace "allowed" only;
// "forbidden" exists and grants nothing.
type authBroker struct {
	url, tlsURL, adminURL string
	state, caFile, caKey  string
	superuser             string // the superuser's token
	idp                   *oidctest.Provider
}

const (
	authAudience      = "urn:pulsar:e2e"
	authTokenLifetime = 15 * time.Second
)

// startAuthBroker starts the broker (a minute or two) and stops it, removing its
// state, when the test ends. Start it only in the tests that need it: it costs CPU.
func startAuthBroker(t *testing.T) *authBroker {
	t.Helper()
	ports, err := broker.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp("", "bridge-auth-pulsar-")
	if err != nil {
		t.Fatal(err)
	}
	ab := &authBroker{url: fmt.Sprintf("pulsar://127.0.0.1:%d", ports[0]), adminURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		tlsURL: fmt.Sprintf("pulsar+ssl://127.0.0.1:%d", ports[3]), state: state,
		caFile: filepath.Join(state, "tls", "ca.crt"), caKey: filepath.Join(state, "tls", "ca.key")}
	// The issuer's address is in the broker's configuration: the provider listens on a
	// port chosen now and lives as long as the broker.
	ab.idp, err = oidctest.New(oidctest.Options{Addr: fmt.Sprintf("127.0.0.1:%d", ports[5]), Lifetime: authTokenLifetime})
	if err != nil {
		t.Fatal(err)
	}
	secretKey := make([]byte, 32)
	_, _ = rand.Read(secretKey)
	authDir := filepath.Join(state, "auth")
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if ab.superuser, err = oidctest.SignWith(secretKey, "", jose.HS256, map[string]any{"sub": "superuser"}); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(authDir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("secret.key", secretKey)
	superFile := write("superuser.token", []byte(ab.superuser))
	conf := write("auth.conf", []byte(strings.Join([]string{
		"authenticationEnabled=true",
		"authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken," +
			"org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID," +
			"org.apache.pulsar.broker.authentication.AuthenticationProviderTls",
		"tokenSecretKey=file://" + keyFile,
		"openIDAllowedTokenIssuers=" + ab.idp.Issuer(),
		"openIDAllowedAudiences=" + authAudience,
		"openIDRequireIssuersUseHttps=false",
		"openIDRoleClaim=sub",
		// A token signed by a key the broker has not seen yet (a rotation) fetches the
		// JWKS again at most this often.
		"openIDKeyIdCacheMissRefreshSeconds=1",
		// Expired credentials are challenged within a few seconds.
		"authenticationRefreshCheckSeconds=2",
		"authorizationEnabled=true",
		"superUserRoles=superuser",
		"brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
		"brokerClientAuthenticationParameters=file://" + superFile,
		"systemTopicEnabled=false",
		"topicLevelPoliciesEnabled=false",
		"",
	}, "\n")))
	env := append(os.Environ(),
		"PULSAR_STATE_DIR="+state,
		fmt.Sprintf("PULSAR_BROKER_PORT=%d", ports[0]), fmt.Sprintf("PULSAR_WEB_PORT=%d", ports[1]),
		fmt.Sprintf("PULSAR_BOOKIE_PORT=%d", ports[2]), fmt.Sprintf("PULSAR_BROKER_TLS_PORT=%d", ports[3]),
		fmt.Sprintf("PULSAR_ZOOKEEPER_PORT=%d", ports[4]),
		"PULSAR_EXTRA_CONF="+conf, "PULSAR_ADMIN_TOKEN_FILE="+superFile,
		"PULSAR_HEAP=384m", "PULSAR_DIRECT_MEMORY=384m")
	script := func(arg string) error {
		cmd := exec.Command(broker.ScriptPath(), arg)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("pulsar.sh %s: %v\n%s", arg, err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := script("stop"); err != nil {
			t.Log(err)
		}
		ab.idp.Close()
		if os.Getenv("KEEP_PULSAR_STATE") == "" {
			_ = os.RemoveAll(state)
		}
	})
	start := time.Now()
	if err := script("start"); err != nil {
		t.Fatal(err)
	}
	t.Logf("authenticating broker healthy after %s: %s, %s, admin %s, issuer %s", time.Since(start).Round(time.Second), ab.url, ab.tlsURL, ab.adminURL, ab.idp.Issuer())
	ab.admin(t, http.MethodPut, "/admin/v2/tenants/auth", `{"allowedClusters":["standalone"]}`)
	ab.admin(t, http.MethodPut, "/admin/v2/namespaces/auth/allowed", "")
	ab.admin(t, http.MethodPut, "/admin/v2/namespaces/auth/forbidden", "")
	return ab
}

// grant gives role produce and consume on auth/allowed.
func (ab *authBroker) grant(t *testing.T, role string) {
	t.Helper()
	ab.admin(t, http.MethodPost, "/admin/v2/namespaces/auth/allowed/permissions/"+role, `["produce","consume"]`)
}

func (ab *authBroker) admin(t *testing.T, method, path, body string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	code, out, err := broker.AdminRequest(ctx, http.DefaultClient, method, ab.adminURL+path, ab.superuser, b)
	if err != nil || code/100 != 2 {
		t.Fatalf("admin %s %s: %d %s %v", method, path, code, out, err)
	}
	return out
}

// TestAuthenticatedBroker runs the bridge against a broker that authenticates and
// authorises every client; one broker serves every subtest.
func TestAuthenticatedBroker(t *testing.T) {
	ab := startAuthBroker(t)
	t.Run("OAuth2StreamOutlivesShortLivedTokensAndAKeyRotationWithoutAFailedRecord", func(t *testing.T) { testOAuth2Stream(t, ab) })
	t.Run("ClientCertificateIsTheIdentityGrantedOneNamespaceOnly", func(t *testing.T) { testMutualTLS(t, ab) })
}

// clientCert writes a client certificate for cn signed by the broker's CA and its key.
func (ab *authBroker) clientCert(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	caPEM, err := os.ReadFile(ab.caFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(ab.caKey)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("the broker's CA files hold no PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if caKey, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func testMutualTLS(t *testing.T, ab *authBroker) {
	const role = "bridge-mtls"
	ab.grant(t, role)
	certFile, keyFile := ab.clientCert(t, role)
	topic := "persistent://auth/allowed/" + broker.Name("mtls")
	forbidden := "persistent://auth/forbidden/" + broker.Name("mtls")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  tls:\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n    authenticate: true\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n  - name: f\n    default: {topic: %s}\n",
		ab.tlsURL, ab.caFile, certFile, keyFile, topic, forbidden))
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	for i := range 20 {
		if err := st.send(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	rs, sum, err := st.finish(time.Minute)
	if err != nil || sum.Published != 20 || sum.Failed != 0 {
		t.Fatalf("publishing as %s to %s: %d receipts, summary %+v, %v", role, topic, len(rs), sum, err)
	}
	// The only credentials are the certificate, whose CN was granted auth/allowed: the
	// broker took the role from it. It refuses the namespace the role has nothing on.
	refusedRecord(t, p, "/v1/publish/f", forbidden)

	// A certificate of the same CA for a CN granted nothing is refused the namespace
	// the first one may use: the role is the certificate's.
	strangerCert, strangerKey := ab.clientCert(t, "stranger")
	q := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  tls:\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n    authenticate: true\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n", ab.tlsURL, ab.caFile, strangerCert, strangerKey, topic))
	refusedRecord(t, q, "/v1/publish/r", topic)
}

func testOAuth2Stream(t *testing.T, ab *authBroker) {
	const clientSecret = "e2e-client-s3cret-4471"
	ab.idp.AddClient("bridge-e2e", oidctest.Client{Secret: clientSecret, Subject: "bridge-oidc"})
	ab.grant(t, "bridge-oidc")
	keyFile := filepath.Join(t.TempDir(), "oauth2.json")
	kb, _ := json.Marshal(map[string]string{"client_id": "bridge-e2e", "client_secret": clientSecret})
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://auth/allowed/" + broker.Name("oauth2")
	forbidden := "persistent://auth/forbidden/" + broker.Name("oauth2")
	before := ab.idp.TokenCalls()
	t.Setenv("BRIDGE_LOG_LEVEL", "debug") // shows the challenges answered and the connections closed
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  oauth2:\n    issuerUrl: %s/\n    privateKey: file:%s\n    audience: %s\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n  - name: f\n    default: {topic: %s}\n",
		ab.url, ab.idp.Issuer(), keyFile, authAudience, topic, forbidden))
	if a := fmt.Sprint(p.readyz(t)["pulsarAuth"]); !strings.HasPrefix(a, "OAuth2 token valid until") {
		t.Fatalf("/readyz pulsarAuth %q", a)
	}

	// One stream for 2.5 token lifetimes, a record every 100 ms, each receipt awaited:
	// the broker challenges each expired token on the open connection and the bridge
	// answers with the refreshed one. Halfway, the provider rotates its signing key
	// (the old one leaves the JWKS): the next token has a key id the broker fetches.
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	end := time.Now().Add(authTokenLifetime * 5 / 2)
	rotateAt := time.Now().Add(authTokenLifetime)
	rotated := false
	n := 0
	for time.Now().Before(end) {
		if !rotated && time.Now().After(rotateAt) {
			if err := ab.idp.Rotate(false); err != nil {
				t.Fatal(err)
			}
			rotated = true
		}
		if err := st.send(rec(n)); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-st.receipts:
			if r.Status != 200 || r.Seq != int64(n) {
				t.Fatalf("record %d: receipt %+v", n, r)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no receipt for record %d", n)
		}
		n++
		time.Sleep(100 * time.Millisecond)
	}
	_, sum, err := st.finish(30 * time.Second)
	if err != nil || sum.Status != 200 || sum.Published != int64(n) || sum.Failed != 0 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	tokens := ab.idp.TokenCalls() - before
	if tokens < 3 {
		t.Fatalf("%d tokens fetched over %s of %s tokens: not refreshed", tokens, authTokenLifetime*5/2, authTokenLifetime)
	}

	resp, err := http.Get(p.OpsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	logs := p.logs.String()
	if n := strings.Count(logs, "answered AUTH_CHALLENGE"); n < 2 {
		t.Fatalf("%d AUTH_CHALLENGEs answered over 2.5 token lifetimes, want at least 2 (one per expired token)", n)
	}
	if strings.Contains(logs, "connection closed") {
		t.Fatalf("a connection to the broker closed: an answered challenge keeps it\n%s", tail(logs, 40))
	}
	for _, secret := range []string{clientSecret, ab.superuser, "eyJ"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the bridge's output shows a secret (%.8s...)", secret)
		}
		if strings.Contains(string(metrics), secret) {
			t.Fatalf("the bridge's metrics show a secret (%.8s...)", secret)
		}
	}
	// The role has nothing on auth/forbidden: the broker refuses, and so does the bridge.
	refusedRecord(t, p, "/v1/publish/f", forbidden)
	t.Logf("%d records over one stream in %s, %d tokens of %s fetched, key rotated once, %d challenges answered on the same connection, none failed", n, authTokenLifetime*5/2, tokens, authTokenLifetime, strings.Count(logs, "answered AUTH_CHALLENGE"))
}

// refusedRecord publishes one record to path and expects it refused for good (502) for
// want of authorisation on topic, the broker's reason in its receipt.
func refusedRecord(t *testing.T, p *bridgeProc, path, topic string) {
	t.Helper()
	st := openStream(t, h1Client, p.DataURL+path, nil)
	if err := st.send(rec(0)); err != nil {
		t.Fatal(err)
	}
	rs, sum, err := st.finish(time.Minute)
	if err != nil || len(rs) != 1 || rs[0].Status != http.StatusBadGateway || !strings.Contains(rs[0].Error, "AuthorizationError") || sum.Failed != 1 {
		t.Fatalf("publishing to %s: receipts %+v, summary %+v, %v; want 502 naming AuthorizationError", topic, rs, sum, err)
	}
	t.Logf("publishing to %s: %d %s", topic, rs[0].Status, rs[0].Error)
}
