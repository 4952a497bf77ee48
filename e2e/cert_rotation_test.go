package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/certtest"
	"github.com/recordio-bridge/bridge/pulsar"
)

// rotationScale is the certificate rotation proof's length: with AUTH_FULL=1 (make
// auth) one stream for 5 minutes, the certificate renewed at 100 s and 200 s, each old
// one expiring 15 s after its renewal; otherwise the same run in 50 s, renewals at 15 s
// and 30 s, 5 s of grace.
type rotationScale struct {
	stream, grace time.Duration
}

func certRotationScale() rotationScale {
	if os.Getenv("AUTH_FULL") != "" {
		return rotationScale{stream: 5 * time.Minute, grace: 15 * time.Second}
	}
	return rotationScale{stream: 50 * time.Second, grace: 5 * time.Second}
}

// shortLivedClientCert issues a client certificate for cn by the broker's CA, valid
// until notAfter, and returns it and its key in PEM.
func (ab *authBroker) shortLivedClientCert(t *testing.T, cn string, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	return ab.ca(t).Issue(t, certtest.Leaf{CN: cn, NotBefore: time.Now().Add(-time.Minute), NotAfter: notAfter})
}

// refusedByBroker reports whether the broker refuses a client presenting this pair
// (its handshake or its CONNECT), with the error.
func (ab *authBroker) refusedByBroker(t *testing.T, certPEM, keyPEM []byte) (bool, error) {
	t.Helper()
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	if err := os.WriteFile(cf, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: ab.tlsURL, TLSCAFile: ab.caFile, TLSCertFile: cf, TLSKeyFile: kf, Auth: pulsar.TLSAuthentication(),
		ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = c.Ping(ctx)
	return err != nil, err
}

// cutConnectionsTo closes every TCP connection to port on this host from the client's
// side (ss -K; root, and a kernel with socket destruction), as a network fault does,
// and returns how many it closed.
func cutConnectionsTo(t *testing.T, port string) int {
	t.Helper()
	out, err := exec.Command("ss", "-K", "-t", "dport", "=", ":"+port).CombinedOutput()
	if err != nil {
		t.Skipf("cannot cut the bridge's connections (ss -K needs root and a kernel with socket destruction): %v %s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, ":"+port) {
			n++
		}
	}
	return n
}

// publisherConnectedSince is when the broker says the topic's only producer connected.
func (ab *authBroker) publisherConnectedSince(t *testing.T, topic string) string {
	t.Helper()
	var st struct {
		Publishers []struct {
			ConnectedSince string `json:"connectedSince"`
			Address        string `json:"address"`
		} `json:"publishers"`
	}
	if err := json.Unmarshal(ab.admin(t, http.MethodGet, adminTopicPath(topic)+"/stats", ""), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Publishers) != 1 {
		return fmt.Sprintf("%d publishers", len(st.Publishers))
	}
	return st.Publishers[0].ConnectedSince + " from " + st.Publishers[0].Address
}

// testClientCertificateRotation: the bridge authenticates with a client certificate
// (the broker's TLS provider takes the role from it at connect time) mounted as a
// cert-manager Secret. During one stream, one record at a time, the certificate is
// renewed twice by swapping the Secret's ..data symlink; each old certificate expires
// shortly after its renewal (the broker refuses it from then on), and only then is the
// bridge made to reconnect (the topic unloaded through the admin API and its
// connections cut). Every record is receipted 200 on the one stream and stored.
func testClientCertificateRotation(t *testing.T, ab *authBroker, leaks *leakCheck) {
	sc := certRotationScale()
	const role = "bridge-rotated"
	ab.grant(t, role)
	start := time.Now()
	renewals := []time.Time{start.Add(sc.stream / 3), start.Add(2 * sc.stream / 3)}
	// Certificate i lasts until renewal i plus the grace; the last one a day.
	c0, k0 := ab.shortLivedClientCert(t, role, renewals[0].Add(sc.grace))
	leaks.secret("a client certificate's private key", string(k0))
	vol := certtest.NewSecretVolume(t, map[string][]byte{"tls.crt": c0, "tls.key": k0})
	topic := "persistent://auth/allowed/" + broker.Name("rotated")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\n  tls:\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n    authenticate: true\n"+
		"routes:\n  - name: r\n    default: {topic: %s}\n", ab.tlsURL, ab.caFile, vol.Path("tls.crt"), vol.Path("tls.key"), topic))
	defer func() { leaks.saw("the bridge's output", p.logs.String()) }()
	u, err := url.Parse(ab.tlsURL)
	if err != nil {
		t.Fatal(err)
	}
	pub := &oauth2Publisher{t: t, p: p, leaks: leaks, ok: map[int]string{}}
	publishUntil := func(until time.Time) {
		for time.Now().Before(until) {
			if r, ok := pub.publish(30 * time.Second); !ok {
				t.Fatalf("record %d after %s of the stream: receipt %+v\n%s", pub.n-1, time.Since(start).Round(time.Second), r, tail(p.logs.String(), 30))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	oldCert, oldKey := c0, k0
	var cuts []int
	for i, at := range renewals {
		publishUntil(at)
		notAfter := time.Now().Add(24 * time.Hour)
		if i+1 < len(renewals) {
			notAfter = renewals[i+1].Add(sc.grace)
		}
		cert, key := ab.shortLivedClientCert(t, role, notAfter)
		leaks.secret("a client certificate's private key", string(key))
		vol.Renew(map[string][]byte{"tls.crt": cert, "tls.key": key})
		renewed := time.Now()
		// The open connection keeps the old certificate until it expires; records flow.
		publishUntil(at.Add(sc.grace + time.Second))
		if refused, err := ab.refusedByBroker(t, oldCert, oldKey); !refused {
			t.Fatalf("renewal %d: the old certificate, expired %s ago, is still accepted by the broker", i+1, time.Since(at.Add(sc.grace)).Round(time.Second))
		} else {
			t.Logf("renewal %d: the old certificate is refused now: %v", i+1, err)
		}
		before := ab.publisherConnectedSince(t, topic)
		ab.admin(t, http.MethodPut, adminTopicPath(topic)+"/unload", "")
		cuts = append(cuts, cutConnectionsTo(t, u.Port()))
		reconnected := time.Now()
		// The next records go through a new connection, which can only be the new
		// certificate's.
		publishUntil(time.Now().Add(3 * time.Second))
		after := ab.publisherConnectedSince(t, topic)
		if after == before {
			t.Fatalf("renewal %d: the producer did not reconnect (%s)", i+1, after)
		}
		t.Logf("renewal %d at %s: %d connections cut %s after it; the producer reconnected (%s, was %s); %d records so far",
			i+1, renewed.Sub(start).Round(time.Second), cuts[i], reconnected.Sub(renewed).Round(time.Second), after, before, pub.n)
		oldCert, oldKey = cert, key
	}
	publishUntil(start.Add(sc.stream))
	streamed := time.Since(start)
	sum := pub.endStream()
	if sum.Status != 200 || sum.Published != int64(pub.n) || sum.Failed != 0 || pub.opened != 1 || len(pub.failed) != 0 {
		t.Fatalf("summary %+v after %d records on %d streams, %d receipts not 200", sum, pub.n, pub.opened, len(pub.failed))
	}
	if n := strings.Count(p.logs.String(), "TLS certificate reloaded"); n != len(renewals) {
		t.Fatalf("the bridge logged %d certificate reloads, want %d\n%s", n, len(renewals), tail(p.logs.String(), 30))
	}

	c, err := official.NewClient(official.ClientOptions{URL: ab.url, Authentication: official.NewAuthenticationToken(ab.superuser),
		OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	onTopic := map[string]int{}
	for _, m := range readAll(t, c, topic, 5*time.Second) {
		onTopic[string(m.Payload())]++
	}
	missing, doubled := 0, 0
	for n := range pub.n {
		switch onTopic[string(rec(n))] {
		case 0:
			missing++
		case 1:
		default:
			doubled++
		}
	}
	if missing != 0 || doubled != 0 {
		t.Fatalf("%d records sent, %d missing from the topic, %d stored more than once", pub.n, missing, doubled)
	}
	leaks.sawGet(t, "/metrics", p.OpsURL+"/metrics")
	t.Logf("figures: one stream of %s, %d records, all receipted 200 and stored once; the certificate renewed twice, each old one expired %s after its renewal and refused by the broker, then the bridge made to reconnect (%v connections cut)",
		streamed.Round(time.Second), pub.n, sc.grace, cuts)
}
