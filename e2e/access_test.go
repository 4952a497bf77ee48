package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// writeCert makes a self-signed certificate for 127.0.0.1 with the given serial and
// writes it and its key as PEM files.
func writeCert(t *testing.T, dir string, serial int64) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "bridge-e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	// Written to temporary names and renamed, as a Secret update would swap them.
	for _, f := range []struct {
		path, typ string
		b         []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", kb}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.b}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// TestAccessControlWithTLSAndTokens: with TLS on the data listener and bearer tokens,
// each route and stream accepts its token and refuses the others (401 without a valid
// token, 403 with one that does not grant it); a token for one route cannot read another
// route's stream; tokens never reach the logs; a renewed certificate is served without a
// restart.
func TestAccessControlWithTLSAndTokens(t *testing.T) {
	b := broker.Get(t)
	dir := t.TempDir()
	certFile, keyFile, pool := writeCert(t, dir, 1)
	readerTokenFile := filepath.Join(dir, "reader-token")
	if err := os.WriteFile(readerTokenFile, []byte("tok-reader-7f3a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	mesos, other := b.Topic(t, "acl-mesos"), b.Topic(t, "acl-other")
	p := startBridge(t, fmt.Sprintf(`
  tls:
    certFile: %s
    keyFile: %s
pulsar:
  url: %s
auth:
  tokens:
    - name: scheduler
      sha256: %s
      routes: [mesos]
    - name: task-reader
      file: %s
      streams: [tasks]
    - name: other-team
      sha256: %s
      routes: [other]
      streams: [others]
routes:
  - name: mesos
    default: {topic: %s}
  - name: other
    default: {topic: %s}
streams:
  - name: tasks
    topics: [%s]
    position: earliest
  - name: others
    topics: [%s]
    position: earliest
`, certFile, keyFile, b.URL, sum("tok-scheduler-91c2"), readerTokenFile, sum("tok-other-44d1"), mesos, other, mesos, other))
	base := strings.Replace(p.DataURL, "http://", "https://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	do := func(method, path, token string, body []byte, h map[string]string) (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 && method == http.MethodGet {
			return resp, "" // a stream: the caller reads it
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp, buf.String()
	}
	one := map[string]string{"Content-Type": "application/json"}
	rec := []byte(`{"type":"UPDATE"}`)
	cases := []struct {
		name, method, path, token string
		status                    int
		msg                       string
	}{
		{"no token", "POST", "/v1/publish/mesos", "", 401, "Authorization: Bearer"},
		{"unknown token", "POST", "/v1/publish/mesos", "tok-guess", 401, "not known"},
		{"unknown token, unknown route", "POST", "/v1/publish/nope", "tok-guess", 401, "not known"},
		{"scheduler publishes to its route", "POST", "/v1/publish/mesos", "tok-scheduler-91c2", 200, ""},
		{"scheduler on another route", "POST", "/v1/publish/other", "tok-scheduler-91c2", 403, "token scheduler may not publish to route other"},
		{"reader may not publish", "POST", "/v1/publish/mesos", "tok-reader-7f3a", 403, "token task-reader may not publish to route mesos"},
		{"other team publishes to its route", "POST", "/v1/publish/other", "tok-other-44d1", 200, ""},
		{"other team may not read tasks", "GET", "/v1/streams/tasks", "tok-other-44d1", 403, "token other-team may not read stream tasks"},
		{"scheduler may not read tasks", "GET", "/v1/streams/tasks", "tok-scheduler-91c2", 403, "may not read stream tasks"},
		{"no token on a stream", "GET", "/v1/streams/tasks", "", 401, "Authorization: Bearer"},
		{"reader acks on a stream it may not read", "POST", "/v1/streams/others/ack", "tok-reader-7f3a", 403, "may not read stream others"},
	}
	for _, c := range cases {
		h := one
		if c.method == "GET" {
			h = map[string]string{"Accept": "application/recordio"}
		}
		resp, body := do(c.method, c.path, c.token, rec, h)
		if resp.StatusCode != c.status || !strings.Contains(body, c.msg) {
			t.Errorf("%s: %d %s; want %d with %q", c.name, resp.StatusCode, body, c.status, c.msg)
		}
		if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("%s: %s over TLS, want HTTP/2", c.name, resp.Proto)
		}
		if c.status == 200 && c.method == "GET" {
			resp.Body.Close()
		}
	}
	// The reader reads what the scheduler published, over HTTP/2 with TLS.
	resp, _ := do("GET", "/v1/streams/tasks", "tok-reader-7f3a", nil, map[string]string{"Accept": "application/recordio"})
	got, err := recordio.NewReader(resp.Body).Next()
	resp.Body.Close()
	if err != nil || string(got) != string(rec) {
		t.Fatalf("reader: %q %v", got, err)
	}
	logs := p.logs.String()
	for _, tok := range []string{"tok-scheduler-91c2", "tok-reader-7f3a", "tok-other-44d1", "tok-guess"} {
		if strings.Contains(logs, tok) {
			t.Fatalf("a token reached the logs: %s", tok)
		}
	}
	// Renew the certificate: new connections get the new one within a couple of seconds.
	_, _, pool2 := writeCert(t, dir, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(p.DataURL, "http://"), &tls.Config{RootCAs: pool2})
		if err == nil {
			serial := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
			conn.Close()
			if serial == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served within 10s (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d access cases over TLS (HTTP/2) as expected; no token in the logs; renewed certificate served without a restart", len(cases))
}
