package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/certtest"
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
	ctl                   func(arg string) error // pulsar.sh stop|start on this broker's ports and state
}

const authAudience = "urn:pulsar:e2e"

// startAuthBroker starts the broker (a minute or two) and stops it, removing its
// state, when the test ends. Start it only in the tests that need it: it costs CPU.
func startAuthBroker(t *testing.T) *authBroker {
	t.Helper()
	state, err := os.MkdirTemp("", "bridge-auth-pulsar-")
	if err != nil {
		t.Fatal(err)
	}
	// Another broker started at the same moment may take a port chosen here (pulsar.sh
	// then exits 75), or the identity provider's: the start is tried again on other ports,
	// all of them, since the provider's address is in the broker's configuration.
	var ab *authBroker
	var script func(arg string) error
	t.Cleanup(func() {
		if script != nil {
			if err := script("stop"); err != nil {
				t.Log(err)
			}
		}
		if ab != nil && ab.idp != nil {
			ab.idp.Close()
		}
		if os.Getenv("KEEP_PULSAR_STATE") == "" {
			_ = os.RemoveAll(state)
		}
	})
	start := time.Now()
	for attempt := 1; ; attempt++ {
		var retry bool
		ab, script, retry, err = startAuthBrokerOn(state)
		if err == nil {
			break
		}
		if !retry || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("ports taken by another process; starting again on other ports (attempt %d of 5): %v", attempt+1, err)
		if script != nil {
			_ = script("stop")
		}
		if ab.idp != nil {
			ab.idp.Close()
		}
		ab, script = nil, nil
		_ = os.RemoveAll(filepath.Join(state, "data"))
	}
	ab.ctl = script
	t.Logf("authenticating broker healthy after %s: %s, %s, admin %s, issuer %s", time.Since(start).Round(time.Second), ab.url, ab.tlsURL, ab.adminURL, ab.idp.Issuer())
	ab.admin(t, http.MethodPut, "/admin/v2/tenants/auth", `{"allowedClusters":["standalone"]}`)
	ab.admin(t, http.MethodPut, "/admin/v2/namespaces/auth/allowed", "")
	// Kept until read back, subscription or not.
	ab.admin(t, http.MethodPost, "/admin/v2/namespaces/auth/allowed/retention", `{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`)
	ab.admin(t, http.MethodPut, "/admin/v2/namespaces/auth/forbidden", "")
	return ab
}

// startAuthBrokerOn starts the authenticating broker in state on ports chosen now; retry
// says that a port was taken by another process and a start on other ports may work.
func startAuthBrokerOn(state string) (ab *authBroker, script func(arg string) error, retry bool, err error) {
	ports, err := broker.FreePorts(6)
	if err != nil {
		return nil, nil, false, err
	}
	ab = &authBroker{url: fmt.Sprintf("pulsar://127.0.0.1:%d", ports[0]), adminURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		tlsURL: fmt.Sprintf("pulsar+ssl://127.0.0.1:%d", ports[3]), state: state,
		caFile: filepath.Join(state, "tls", "ca.crt"), caKey: filepath.Join(state, "tls", "ca.key")}
	// The issuer's address is in the broker's configuration: the provider listens on a
	// port chosen now and lives as long as the broker.
	ab.idp, err = oidctest.New(oidctest.Options{Addr: fmt.Sprintf("127.0.0.1:%d", ports[5]), Lifetime: oauth2Scale().lifetime})
	if err != nil {
		return ab, nil, true, fmt.Errorf("the identity provider on port %d: %w", ports[5], err)
	}
	secretKey := make([]byte, 32)
	_, _ = rand.Read(secretKey)
	authDir := filepath.Join(state, "auth")
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		return ab, nil, false, err
	}
	if ab.superuser, err = oidctest.SignWith(secretKey, "", jose.HS256, map[string]any{"sub": "superuser"}); err != nil {
		return ab, nil, false, err
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(authDir, name)
		if werr := os.WriteFile(p, b, 0o600); werr != nil && err == nil {
			err = werr
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
	script = func(arg string) error {
		cmd := exec.Command(broker.ScriptPath(), arg)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("pulsar.sh %s: %w\n%s", arg, err, out)
		}
		return nil
	}
	if err != nil {
		return ab, nil, false, err
	}
	err = script("start")
	return ab, script, broker.PortsTaken(err), err
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
	leaks := newLeakCheck()
	leaks.secret("the superuser's token", ab.superuser)
	t.Run("OAuth2StreamOutlivesShortLivedTokensAKeyRotationAndAProviderOutageWithoutLosingARecord", func(t *testing.T) { testOAuth2Stream(t, ab, leaks) })
	t.Run("ClientCertificateIsTheIdentityGrantedOneNamespaceOnly", func(t *testing.T) { testMutualTLS(t, ab, leaks) })
	t.Run("ClientCertificateRenewedTwiceDuringAStreamEachOldOneExpiredBeforeTheReconnection", func(t *testing.T) { testClientCertificateRotation(t, ab, leaks) })
	t.Run("NothingSecretInTheBridgesOutputAnswersOrMetrics", func(t *testing.T) {
		n, secrets := leaks.check(t)
		if n == 0 || secrets < 4 {
			t.Fatalf("searched %d bytes for %d secrets: nothing collected", n, secrets)
		}
		t.Logf("searched %d bytes of output, answers and metrics for %d secrets", n, secrets)
	})
}

// ca is the broker's CA, which issues the clients' certificates.
func (ab *authBroker) ca(t *testing.T) *certtest.CA { return certtest.LoadCA(t, ab.caFile, ab.caKey) }

// clientCert writes a client certificate for cn signed by the broker's CA, valid for a
// day, and its key.
func (ab *authBroker) clientCert(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	return ab.ca(t).IssueFiles(t, certtest.Leaf{CN: cn, NotAfter: time.Now().Add(24 * time.Hour)})
}

func testMutualTLS(t *testing.T, ab *authBroker, leaks *leakCheck) {
	const role = "bridge-mtls"
	ab.grant(t, role)
	certFile, keyFile := ab.clientCert(t, role)
	if b, err := os.ReadFile(keyFile); err != nil {
		t.Fatal(err)
	} else {
		leaks.secret("the client certificate's private key", string(b))
	}
	topic := "persistent://auth/allowed/" + broker.Name("mtls")
	forbidden := "persistent://auth/forbidden/" + broker.Name("mtls")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  tls:\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n    authenticate: true\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n  - name: f\n    default: {topic: %s}\n",
		ab.tlsURL, ab.caFile, certFile, keyFile, topic, forbidden))
	defer func() { leaks.saw("the bridge's output", p.logs.String()) }()
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	for i := range 20 {
		if err := st.send(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	rs, sum, err := st.finish(time.Minute)
	leaks.sawJSON("receipts", rs)
	if err != nil || sum.Published != 20 || sum.Failed != 0 {
		t.Fatalf("publishing as %s to %s: %d receipts, summary %+v, %v", role, topic, len(rs), sum, err)
	}
	// The only credentials are the certificate, whose CN was granted auth/allowed: the
	// broker took the role from it. It refuses the namespace the role has nothing on.
	leaks.saw("a refusal", refusedRecord(t, p, "/v1/publish/f", forbidden))
	leaks.sawGet(t, "/metrics", p.OpsURL+"/metrics")

	// A certificate of the same CA for a CN granted nothing is refused the namespace
	// the first one may use: the role is the certificate's.
	strangerCert, strangerKey := ab.clientCert(t, "stranger")
	q := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  tls:\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n    authenticate: true\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n", ab.tlsURL, ab.caFile, strangerCert, strangerKey, topic))
	defer func() { leaks.saw("the bridge's output", q.logs.String()) }()
	leaks.saw("a refusal", refusedRecord(t, q, "/v1/publish/r", topic))
}

// authScale is the OAuth2 proof's length: with AUTH_FULL=1 (make auth) tokens of 60 s,
// one stream for 5 minutes, the identity provider stopped for 2; otherwise (make e2e)
// the same run scaled to 15-second tokens.
type authScale struct {
	lifetime, stream, outage time.Duration
}

func oauth2Scale() authScale {
	if os.Getenv("AUTH_FULL") != "" {
		return authScale{lifetime: 60 * time.Second, stream: 5 * time.Minute, outage: 2 * time.Minute}
	}
	return authScale{lifetime: 15 * time.Second, stream: 40 * time.Second, outage: 30 * time.Second}
}

// challengeAnswer is one "answered AUTH_CHALLENGE" line of the bridge's debug log.
type challengeAnswer struct {
	Time        time.Time `json:"time"`
	Msg         string    `json:"msg"`
	Broker      string    `json:"broker"`
	Credentials string    `json:"credentials"`
}

func challengeAnswers(logs string) []challengeAnswer {
	var out []challengeAnswer
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "answered AUTH_CHALLENGE") {
			continue
		}
		var c challengeAnswer
		if json.Unmarshal([]byte(line), &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

func fingerprint(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:6])
}

// oauth2Publisher sends one record at a time on a stream and awaits its receipt,
// opening a new stream when one ends; it remembers every receipt. Record n's payload
// is rec(n); on a stream opened before record base, its receipt's seq is n-base.
type oauth2Publisher struct {
	t      *testing.T
	p      *bridgeProc
	leaks  *leakCheck
	st     *ingressStream
	base   int
	n      int            // the next record
	ok     map[int]string // record -> message id of its 200 receipt
	failed []receipt      // receipts other than 200
	opened int            // streams opened
}

// publish sends the next record and waits up to wait for its receipt.
func (o *oauth2Publisher) publish(wait time.Duration) (receipt, bool) {
	if o.st == nil {
		o.st, o.base = openStream(o.t, h1Client, o.p.DataURL+"/v1/publish/r", nil), o.n
		o.opened++
	}
	n := o.n
	o.n++
	if err := o.st.send(rec(n)); err != nil {
		o.endStream()
		return receipt{Seq: -1, Error: "send: " + err.Error()}, false
	}
	deadline := time.After(wait)
	for {
		select {
		case r, open := <-o.st.receipts:
			if !open {
				o.endStream()
				return receipt{Seq: -1, Error: "the stream ended"}, false
			}
			o.leaks.sawJSON("a receipt", r)
			if r.Summary {
				continue
			}
			o.record(r)
			if int(r.Seq)+o.base == n {
				return r, r.Status == 200
			}
		case <-deadline:
			return receipt{Seq: -1, Error: "no receipt within " + wait.String()}, false
		}
	}
}

func (o *oauth2Publisher) record(r receipt) {
	if r.Status == 200 {
		o.ok[int(r.Seq)+o.base] = r.MessageID
	} else {
		o.failed = append(o.failed, r)
	}
}

// endStream finishes the current stream, remembering its late receipts, and returns
// its summary.
func (o *oauth2Publisher) endStream() receipt {
	if o.st == nil {
		return receipt{}
	}
	rs, sum, err := o.st.finish(2 * time.Minute)
	for _, r := range rs {
		o.leaks.sawJSON("a receipt", r)
		o.record(r)
	}
	o.leaks.sawJSON("a stream's summary", sum)
	if err != nil {
		o.t.Logf("a stream ended: %v (summary %+v)", err, sum)
	}
	o.st = nil
	return sum
}

// waitReady polls /readyz until ready says so, keeping every answer for leaks, and
// returns the last answer.
func waitReadyz(t *testing.T, p *bridgeProc, leaks *leakCheck, ready bool, within time.Duration) (map[string]any, time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(p.OpsURL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		leaks.saw("/readyz", string(body))
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		if (resp.StatusCode == http.StatusOK) == ready {
			return m, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s after %s", resp.StatusCode, body, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testOAuth2Stream(t *testing.T, ab *authBroker, leaks *leakCheck) {
	sc := oauth2Scale()
	const clientSecret = "e2e-client-s3cret-4471"
	leaks.secret("the OAuth2 client secret", clientSecret)
	ab.idp.AddClient("bridge-e2e", oidctest.Client{Secret: clientSecret, Subject: "bridge-oidc"})
	ab.grant(t, "bridge-oidc")
	keyFile := filepath.Join(t.TempDir(), "oauth2.json")
	kb, _ := json.Marshal(map[string]string{"client_id": "bridge-e2e", "client_secret": clientSecret})
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	leaks.secret("the OAuth2 credentials file", string(kb))
	topic := "persistent://auth/allowed/" + broker.Name("oauth2")
	forbidden := "persistent://auth/forbidden/" + broker.Name("oauth2")
	issuedBefore := len(ab.idp.Issued())
	t.Setenv("BRIDGE_LOG_LEVEL", "debug") // shows the challenges answered and the connections closed
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  oauth2:\n    issuerUrl: %s/\n    privateKey: file:%s\n    audience: %s\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n  - name: f\n    default: {topic: %s}\n",
		ab.url, ab.idp.Issuer(), keyFile, authAudience, topic, forbidden))
	defer func() {
		leaks.saw("the bridge's output", p.logs.String())
		for _, is := range ab.idp.Issued()[issuedBefore:] {
			leaks.secret("an OAuth2 access token", is.Token)
		}
	}()
	if m, _ := waitReadyz(t, p, leaks, true, time.Second); !strings.HasPrefix(fmt.Sprint(m["pulsarAuth"]), "OAuth2 token valid until") {
		t.Fatalf("/readyz pulsarAuth %q", m["pulsarAuth"])
	}
	pub := &oauth2Publisher{t: t, p: p, leaks: leaks, ok: map[int]string{}}

	// One stream for sc.stream, a record every 100 ms, each receipt awaited: the broker
	// (refresh check every 2 s) challenges each expired token on the open connection
	// and the bridge answers with the refreshed one. Halfway, the provider rotates its
	// signing key (the old one leaves the JWKS): the next token has a key id the broker
	// fetches.
	start := time.Now()
	end, rotateAt := start.Add(sc.stream), start.Add(sc.stream/2)
	rotated := false
	for time.Now().Before(end) {
		if !rotated && time.Now().After(rotateAt) {
			if err := ab.idp.Rotate(false); err != nil {
				t.Fatal(err)
			}
			rotated = true
		}
		if r, ok := pub.publish(30 * time.Second); !ok {
			t.Fatalf("record %d after %s of the stream: receipt %+v", pub.n-1, time.Since(start).Round(time.Second), r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	streamed := time.Since(start)
	sum := pub.endStream()
	if sum.Status != 200 || sum.Published != int64(pub.n) || sum.Failed != 0 || pub.opened != 1 {
		t.Fatalf("summary %+v after %d records on %d streams", sum, pub.n, pub.opened)
	}
	logs := p.logs.String()
	if strings.Contains(logs, "connection closed") {
		t.Fatalf("a connection to the broker closed: an answered challenge keeps it\n%s", tail(logs, 40))
	}
	issued := ab.idp.Issued()[issuedBefore:]
	byPrint := map[string]oidctest.Issued{}
	for _, is := range issued {
		byPrint[fingerprint(is.Token)] = is
	}
	answers := challengeAnswers(logs)
	distinct := map[string]bool{}
	for _, a := range answers {
		is, ok := byPrint[a.Credentials]
		if !ok {
			t.Fatalf("a challenge at %s was answered with credentials %s, not a token the provider issued", a.Time, a.Credentials)
		}
		if !a.Time.Before(is.Expiry) {
			t.Fatalf("a challenge at %s was answered with a token that expired at %s", a.Time, is.Expiry)
		}
		distinct[a.Credentials] = true
	}
	// Each token lasts sc.lifetime and is replaced after 90 % of it: over the stream the
	// broker finds one expired about every lifetime and the bridge answers with the
	// next token. The first token is CONNECT's, never a challenge's.
	expirations := int(streamed / sc.lifetime)
	if len(answers) < expirations || len(distinct) < expirations {
		t.Fatalf("%d challenges answered with %d distinct tokens over %s of %s tokens, want at least %d of each", len(answers), len(distinct), streamed.Round(time.Second), sc.lifetime, expirations)
	}
	if maxIssued := int(float64(streamed)/(0.9*float64(sc.lifetime))) + 2; len(issued) < expirations+1 || len(issued) > maxIssued {
		t.Fatalf("%d tokens issued over %s of %s tokens, want %d to %d", len(issued), streamed.Round(time.Second), sc.lifetime, expirations+1, maxIssued)
	}
	t.Logf("OAuth2 stream: %d records on one stream over %s, none failed; %d tokens of %s issued, key rotated once; %d challenges answered with %d distinct tokens, each unexpired, no connection closed",
		pub.n, streamed.Round(time.Second), len(issued), sc.lifetime, len(answers), len(distinct))
	streamRecords, streamTokens, streamAnswers, streamDistinct := pub.n, len(issued), len(answers), len(distinct)

	testOAuth2ProviderOutage(t, ab, p, pub, sc, leaks)

	// Every record the bridge receipted with 200 is on the topic.
	c, err := official.NewClient(official.ClientOptions{URL: ab.url, Authentication: official.NewAuthenticationToken(ab.superuser),
		OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	onTopic := map[string]bool{}
	for _, m := range readAll(t, c, topic, 5*time.Second) {
		onTopic[string(m.Payload())] = true
	}
	for n := range pub.ok {
		if !onTopic[string(rec(n))] {
			t.Errorf("record %d was receipted 200 (%s) but is not on %s", n, pub.ok[n], topic)
		}
	}
	t.Logf("%d records receipted 200, all %d found on the topic (%d messages); %d receipts not 200", len(pub.ok), len(pub.ok), len(onTopic), len(pub.failed))
	if len(pub.failed) > 0 {
		t.Logf("the first receipt not 200: %+v", pub.failed[0])
	}

	// The role has nothing on auth/forbidden: the broker refuses, and so does the bridge.
	leaks.saw("a refusal", refusedRecord(t, p, "/v1/publish/f", forbidden))
	leaks.sawGet(t, "/metrics", p.OpsURL+"/metrics")
	t.Logf("figures: stream %s, tokens %s: %d records, %d tokens issued, %d challenges answered with %d distinct tokens", streamed.Round(time.Second), sc.lifetime, streamRecords, streamTokens, streamAnswers, streamDistinct)
}

// testOAuth2ProviderOutage stops the identity provider right after it issued a token,
// for sc.outage: records keep flowing while that token lasts; once it has expired
// /readyz is unready saying why; when the provider is back the bridge is ready again
// and records flow.
func testOAuth2ProviderOutage(t *testing.T, ab *authBroker, p *bridgeProc, pub *oauth2Publisher, sc authScale, leaks *leakCheck) {
	calls := ab.idp.TokenCalls()
	deadline := time.Now().Add(sc.lifetime + 10*time.Second)
	for ab.idp.TokenCalls() == calls {
		if time.Now().After(deadline) {
			t.Fatalf("no token refreshed within %s", sc.lifetime+10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The provider counts a token request when it arrives and records the token before
	// its answer is written: stopping it at once could cut that answer, leaving the
	// bridge with the token before (which expires sooner). Stop it only once the bridge
	// holds the newest token, as its /readyz says.
	var last oidctest.Issued
	for held := ""; ; time.Sleep(50 * time.Millisecond) {
		issued := ab.idp.Issued()
		last = issued[len(issued)-1]
		m, _ := waitReadyz(t, p, leaks, true, 10*time.Second)
		if held = fmt.Sprint(m["pulsarAuth"]); held == "OAuth2 token valid until "+last.Expiry.UTC().Format(time.RFC3339) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge does not hold the newest token (valid until %s): /readyz says %q", last.Expiry.UTC().Format(time.RFC3339), held)
		}
	}
	ab.idp.Stop()
	stopped := time.Now()
	t.Logf("identity provider stopped; the bridge's token expires at %s (in %s)", last.Expiry.Format(time.RFC3339), time.Until(last.Expiry).Round(time.Second))

	// While the token lasts (a margin for the second-granular exp): every record is
	// receipted 200 and /readyz stays ready.
	lasted := 0
	for time.Now().Before(last.Expiry.Add(-3 * time.Second)) {
		if r, ok := pub.publish(30 * time.Second); !ok {
			t.Fatalf("record %d %s after the provider stopped, while the token was still valid: %+v", pub.n-1, time.Since(stopped).Round(time.Second), r)
		}
		lasted++
		waitReadyz(t, p, leaks, true, 0)
		time.Sleep(100 * time.Millisecond)
	}
	// Once it has expired /readyz turns unready, naming the issuer and the failure. The
	// broker may refuse the token a moment before the bridge's own clock expires it (its
	// exp is in whole seconds): /readyz is then unready first for the broker's refusal of
	// the credentials, and pulsarAuth says so once the bridge's clock has passed the expiry.
	m, at := waitReadyz(t, p, leaks, false, 30*time.Second)
	for until := time.Now().Add(30 * time.Second); !strings.Contains(fmt.Sprint(m["pulsarAuth"]), "no valid OAuth2 token") && time.Now().Before(until); {
		if b := fmt.Sprint(m["broker"]); !strings.Contains(b, "refusing the bridge's credentials") {
			t.Fatalf("/readyz unready with pulsarAuth %q and broker %q, want one to say the token is no longer accepted", m["pulsarAuth"], b)
		}
		time.Sleep(200 * time.Millisecond)
		m, at = waitReadyz(t, p, leaks, false, 30*time.Second)
	}
	reason := fmt.Sprint(m["pulsarAuth"])
	if !strings.Contains(reason, "no valid OAuth2 token") || !strings.Contains(reason, ab.idp.Issuer()) || !strings.Contains(reason, "refused") {
		t.Fatalf("/readyz unready with pulsarAuth %q, want it to say no valid token, the issuer and the failure", reason)
	}
	if at.Before(last.Expiry) {
		t.Fatalf("/readyz unready at %s, before the token expired at %s", at, last.Expiry)
	}
	t.Logf("%d records receipted 200 while the token lasted; /readyz unready %s after its expiry: %s", lasted, at.Sub(last.Expiry).Round(100*time.Millisecond), reason)

	// The rest of the outage: records keep being offered, one a second; whatever their
	// receipts say, none receipted 200 may be missing from the topic.
	during := 0
	for time.Now().Before(stopped.Add(sc.outage)) {
		if _, ok := pub.publish(time.Second); ok {
			during++
		}
		time.Sleep(time.Second)
	}
	if err := ab.idp.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("identity provider back after %s; %d records receipted 200 after the token expired", back.Sub(stopped).Round(time.Second), during)
	// The refresh is retried with backoff (at most 30 s apart).
	m, at = waitReadyz(t, p, leaks, true, time.Minute)
	if a := fmt.Sprint(m["pulsarAuth"]); !strings.HasPrefix(a, "OAuth2 token valid until") {
		t.Fatalf("/readyz ready again with pulsarAuth %q", a)
	}
	// Records flow again: on a fresh stream, each receipted 200.
	pub.endStream()
	for i := 0; i < 20; i++ {
		if r, ok := pub.publish(time.Minute); !ok {
			t.Fatalf("record %d after the provider came back: %+v", pub.n-1, r)
		}
	}
	pub.endStream()
	t.Logf("ready again %s after the provider came back; 20 records on a new stream receipted 200", at.Sub(back).Round(100*time.Millisecond))
}

// refusedRecord publishes one record to path and expects it refused for good (502) for
// want of authorisation on topic, the broker's reason in its receipt, which it returns.
func refusedRecord(t *testing.T, p *bridgeProc, path, topic string) string {
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
	return rs[0].Error
}

// TestWrongOAuth2CredentialsStopTheBridgeAtStartUpNamingTheIssuerAndItsAnswer runs the
// binary with a client secret the identity provider refuses: it exits non-zero at
// start-up, its error naming the issuer and the provider's answer (status, error and
// description) and showing neither the wrong secret nor the right one.
func TestWrongOAuth2CredentialsStopTheBridgeAtStartUpNamingTheIssuerAndItsAnswer(t *testing.T) {
	idp, err := oidctest.New(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	const right, wrong = "right-s3cret-5521", "wrong-s3cret-1187"
	idp.AddClient("bridge", oidctest.Client{Secret: right})
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "oauth2.json")
	if err := os.WriteFile(keyFile, []byte(`{"client_id": "bridge", "client_secret": "`+wrong+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen:\n  data: 127.0.0.1:0\n  ops: localhost:0\npulsar:\n  url: pulsar://127.0.0.1:1\n  oauth2:\n    issuerUrl: %s/\n    privateKey: file:%s\n    audience: %s\nroutes:\n  - name: r\n    default: {topic: t}\n",
		idp.Issuer(), keyFile, authAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBin(t), "run", "-config", cfg, "-log-level", "debug")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the bridge did not fail at start-up: %v\n%s", err, out)
	}
	for _, want := range []string{"pulsar.oauth2", idp.Issuer(), "401", "invalid_client", "client authentication failed"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("the start-up error does not name %q:\n%s", want, out)
		}
	}
	for _, s := range []string{right, wrong} {
		if bytes.Contains(out, []byte(s)) {
			t.Fatalf("the start-up error shows a secret:\n%s", out)
		}
	}
	t.Logf("exit %d: %s", ee.ExitCode(), bytes.TrimSpace(out))
}
