package pulsar_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/certfile"
	"github.com/recordio-bridge/bridge/internal/certtest"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

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
	ca := certtest.NewCA(t, "cluster CA")
	_, _, serverPair := ca.IssuePair(t, certtest.Leaf{CN: "broker", Server: true})
	var seen peerNames
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverPair}, ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: seen.verify}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c1, k1, _ := ca.IssuePair(t, certtest.Leaf{CN: "bridge-1"})
	vol := certtest.NewSecretVolume(t, map[string][]byte{"tls.crt": c1, "tls.key": k1, "ca.crt": ca.CertPEM})
	var refused []error
	var refusedMu sync.Mutex
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile = vol.Path("ca.crt"), vol.Path("tls.crt"), vol.Path("tls.key")
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
	c2, k2, _ := ca.IssuePair(t, certtest.Leaf{CN: "bridge-2"})
	vol.Renew(map[string][]byte{"tls.crt": c2, "tls.key": k2, "ca.crt": ca.CertPEM})
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
	c3, _, _ := ca.IssuePair(t, certtest.Leaf{CN: "bridge-3"})
	vol.Renew(map[string][]byte{"tls.crt": c3, "tls.key": k2, "ca.crt": ca.CertPEM})
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
	c4, k4, _ := ca.IssuePair(t, certtest.Leaf{CN: "bridge-4"})
	vol.Renew(map[string][]byte{"tls.crt": c4, "tls.key": k4, "ca.crt": ca.CertPEM})
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
	oldCA, newCA := certtest.NewCA(t, "old CA"), certtest.NewCA(t, "new CA")
	_, _, oldServer := oldCA.IssuePair(t, certtest.Leaf{CN: "broker", Server: true})
	_, _, newServer := newCA.IssuePair(t, certtest.Leaf{CN: "broker", Server: true})
	var serving atomic.Pointer[tls.Certificate]
	serving.Store(&oldServer)
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil }}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vol := certtest.NewSecretVolume(t, map[string][]byte{"ca.crt": oldCA.CertPEM})
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.TLSCAFile = vol.Path("ca.crt") })
	p := producer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/new-ca"})
	if err := sendOne(t, p, "m-00000"); err != nil {
		t.Fatal(err)
	}
	serving.Store(&newServer)
	vol.Renew(map[string][]byte{"ca.crt": append(append([]byte{}, oldCA.CertPEM...), newCA.CertPEM...)})
	time.Sleep(10 * time.Millisecond)
	b.DropConnections()
	if err := sendOne(t, p, "m-00001"); err != nil {
		t.Fatalf("after the CA bundle changed to trust the broker's new CA: %v", err)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/new-ca", 2)
}
