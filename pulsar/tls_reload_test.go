package pulsar_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/certfile"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// testCA issues certificates for the TLS reload tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate for cn (a server's for 127.0.0.1 when server, a
// client's otherwise) in PEM, its key in PEM, and both as a tls.Certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

// secretVolume lays files out as a Kubernetes Secret volume (cert-manager's) does:
// name -> ..data/name, ..data -> a directory of this generation; update swaps ..data
// at once.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

func (v *secretVolume) update(files map[string][]byte) {
	v.t.Helper()
	v.gen++
	gen := fmt.Sprintf("..2026_12_06_%02d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o700); err != nil {
		v.t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, gen, name), b, 0o600); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

// peerNames records the common name of the client certificate each TLS handshake of a
// broker was given.
type peerNames struct {
	mu    sync.Mutex
	names []string
}

func (p *peerNames) verify(cs tls.ConnectionState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(cs.PeerCertificates) == 0 {
		p.names = append(p.names, "")
		return nil
	}
	p.names = append(p.names, cs.PeerCertificates[0].Subject.CommonName)
	return nil
}

func (p *peerNames) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.names) == 0 {
		return "(no handshake)"
	}
	return p.names[len(p.names)-1]
}

func (p *peerNames) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.names)
}

// sendOne sends one message, bounded by a few seconds.
func sendOne(t *testing.T, p *pulsar.Producer, payload string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)})
	return err
}

// TestClientPresentsARenewedCertificateOnItsNextConnection: the client certificate and
// key live in a Secret volume that cert-manager renews by swapping its ..data symlink.
// After each renewal the next connection (the broker dropped the open one) presents
// the new certificate; a renewal that leaves a mismatched pair (the new certificate
// with the old key) is refused, reported once, and the last good pair is presented
// until a good pair arrives. The open connection is never cut for a renewal.
func TestClientPresentsARenewedCertificateOnItsNextConnection(t *testing.T) {
	defer pulsar.SetTLSFilesEvery(time.Millisecond)()
	ca := newTestCA(t, "cluster CA")
	_, _, serverPair := ca.issue(t, "broker", true)
	var seen peerNames
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverPair}, ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: seen.verify}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c1, k1, _ := ca.issue(t, "bridge-1", false)
	vol := newSecretVolume(t, map[string][]byte{"tls.crt": c1, "tls.key": k1, "ca.crt": ca.pem})
	var refused []error
	var refusedMu sync.Mutex
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile = vol.path("ca.crt"), vol.path("tls.crt"), vol.path("tls.key")
		o.TLSFileRefused = func(err error) {
			refusedMu.Lock()
			refused = append(refused, err)
			refusedMu.Unlock()
		}
	})
	p := producer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/renewed"})
	if err := sendOne(t, p, "m-00000"); err != nil {
		t.Fatal(err)
	}
	if got := seen.last(); got != "bridge-1" {
		t.Fatalf("first connection presented %q, want bridge-1", got)
	}

	// Renewed: the open connection is kept; the next one presents the new certificate.
	c2, k2, _ := ca.issue(t, "bridge-2", false)
	vol.update(map[string][]byte{"tls.crt": c2, "tls.key": k2, "ca.crt": ca.pem})
	time.Sleep(10 * time.Millisecond)
	handshakes := seen.count()
	if err := sendOne(t, p, "m-00001"); err != nil {
		t.Fatal(err)
	}
	if seen.count() != handshakes {
		t.Fatal("a renewal opened a new connection: the open one must be kept")
	}
	b.DropConnections()
	if err := sendOne(t, p, "m-00002"); err != nil {
		t.Fatal(err)
	}
	if got := seen.last(); got != "bridge-2" {
		t.Fatalf("after the renewal the next connection presented %q, want bridge-2", got)
	}

	// A mismatched pair: refused, reported once, the last good pair presented.
	c3, _, _ := ca.issue(t, "bridge-3", false)
	vol.update(map[string][]byte{"tls.crt": c3, "tls.key": k2, "ca.crt": ca.pem})
	time.Sleep(10 * time.Millisecond)
	for i := range 2 {
		b.DropConnections()
		if err := sendOne(t, p, fmt.Sprintf("m-%05d", 3+i)); err != nil {
			t.Fatal(err)
		}
		if got := seen.last(); got != "bridge-2" {
			t.Fatalf("after a mismatched pair the next connection presented %q, want bridge-2 (the last good one)", got)
		}
	}
	refusedMu.Lock()
	if len(refused) != 1 || !errors.Is(refused[0], certfile.ErrRefused) {
		t.Fatalf("refusals reported: %v, want one", refused)
	}
	refusedMu.Unlock()

	// A good pair again is taken.
	c4, k4, _ := ca.issue(t, "bridge-4", false)
	vol.update(map[string][]byte{"tls.crt": c4, "tls.key": k4, "ca.crt": ca.pem})
	time.Sleep(10 * time.Millisecond)
	b.DropConnections()
	if err := sendOne(t, p, "m-00005"); err != nil {
		t.Fatal(err)
	}
	if got := seen.last(); got != "bridge-4" {
		t.Fatalf("after a good pair the next connection presented %q, want bridge-4", got)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/renewed", 6)
}

// TestClientTrustsAChangedCABundleOnItsNextConnection: the broker's certificate is
// renewed by a new CA and the client's CA file changed to trust it (both CAs, as
// during a CA rotation); the next connection verifies the broker against the new
// bundle.
func TestClientTrustsAChangedCABundleOnItsNextConnection(t *testing.T) {
	defer pulsar.SetTLSFilesEvery(time.Millisecond)()
	oldCA, newCA := newTestCA(t, "old CA"), newTestCA(t, "new CA")
	_, _, oldServer := oldCA.issue(t, "broker", true)
	_, _, newServer := newCA.issue(t, "broker", true)
	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&oldServer)
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil }}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vol := newSecretVolume(t, map[string][]byte{"ca.crt": oldCA.pem})
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.TLSCAFile = vol.path("ca.crt") })
	p := producer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/new-ca"})
	if err := sendOne(t, p, "m-00000"); err != nil {
		t.Fatal(err)
	}
	serving.Store(&newServer)
	vol.update(map[string][]byte{"ca.crt": append(append([]byte{}, oldCA.pem...), newCA.pem...)})
	time.Sleep(10 * time.Millisecond)
	b.DropConnections()
	if err := sendOne(t, p, "m-00001"); err != nil {
		t.Fatalf("after the CA bundle changed to trust the broker's new CA: %v", err)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/new-ca", 2)
}
