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
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// twoBrokerCerts returns a CA file and server certificates that each name one host
// only: 127.0.0.1 (an IP SAN) and localhost (a DNS SAN).
func twoBrokerCerts(t *testing.T) (caFile string, byIP, byName tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cluster CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, dns []string, ips []net.IP) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "broker"}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: dns, IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, leaf(2, nil, []net.IP{net.ParseIP("127.0.0.1")}), leaf(3, []string{"localhost"}, nil)
}

// TestTLSVerifiesEachBrokerOfAClusterByItsOwnName: the service URL's broker has a
// certificate for 127.0.0.1, the broker owning the topic one for localhost only; the
// lookup redirects to pulsar+ssl://localhost:port and the client must verify that
// broker against "localhost", not against the service URL's host. Through a proxy
// (proxy_through_service_url) the proxy's own name is verified; a configured
// TLSServerName is verified everywhere.
func TestTLSVerifiesEachBrokerOfAClusterByItsOwnName(t *testing.T) {
	caFile, byIP, byName := twoBrokerCerts(t)
	service, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{byIP}}))
	if err != nil {
		t.Fatal(err)
	}
	defer service.Close()
	owner, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{byName}}), pulsartest.WithAdvertisedHost("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	const moved, proxied = "persistent://public/default/moved", "persistent://public/default/proxied"
	service.Redirect(moved, owner.URL(), false)
	service.Redirect(proxied, owner.URL(), true)
	withCA := func(o *pulsar.ClientOptions) { o.TLSCAFile, o.OperationTimeout = caFile, 3*time.Second }

	c := client(t, service.URL(), withCA)
	p := producer(t, c, pulsar.ProducerOptions{Topic: moved})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatalf("sending to the broker named localhost: %v", err)
	}
	exactlyOnceInOrder(t, owner, moved, 1)

	// Proxied: the connection goes to the service URL's host, whose name is verified.
	p2 := producer(t, c, pulsar.ProducerOptions{Topic: proxied})
	if _, err := p2.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatalf("sending through the proxy: %v", err)
	}
	if got := service.ProxyTargets(); len(got) == 0 || got[len(got)-1] != strings.TrimPrefix(owner.URL(), "pulsar+ssl://") {
		t.Fatalf("proxy targets %v", got)
	}

	// A configured server name is the one verified, on every broker.
	fixed := client(t, service.URL(), func(o *pulsar.ClientOptions) { withCA(o); o.TLSServerName = "127.0.0.1" })
	_, err = fixed.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: moved})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("with TLSServerName 127.0.0.1 the localhost broker must be refused: %v", err)
	}
}
