package certtest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A client certificate verifies against its CA for client authentication, a server's
// for 127.0.0.1; a CA read back from its files issues as the one that wrote them.
func TestIssuedCertificatesVerifyForTheirUse(t *testing.T) {
	ca := NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	notAfter := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	for _, c := range []struct {
		name  string
		ca    *CA
		leaf  Leaf
		usage x509.ExtKeyUsage
		host  string
	}{
		{"client", ca, Leaf{CN: "client", NotAfter: notAfter}, x509.ExtKeyUsageClientAuth, ""},
		{"server", ca, Leaf{CN: "server", Server: true}, x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"loaded", LoadCA(t, certFile, keyFile), Leaf{CN: "loaded"}, x509.ExtKeyUsageClientAuth, ""},
	} {
		_, _, pair := c.ca.IssuePair(t, c.leaf)
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{c.usage}, DNSName: c.host}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if cert.Subject.CommonName != c.leaf.CN || (!c.leaf.NotAfter.IsZero() && !cert.NotAfter.Equal(c.leaf.NotAfter)) {
			t.Errorf("%s: issued for %q until %v, want %q until %v", c.name, cert.Subject.CommonName, cert.NotAfter, c.leaf.CN, c.leaf.NotAfter)
		}
	}
}

// After a renewal the mounted names read the new generation, and the previous
// generation's directory is gone, as after the kubelet's update.
func TestSecretVolumeRenewalSwapsEveryFileAtOnce(t *testing.T) {
	v := NewSecretVolume(t, map[string][]byte{"tls.crt": []byte("cert 1"), "tls.key": []byte("key 1")})
	first, err := os.Readlink(filepath.Join(v.dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	v.Renew(map[string][]byte{"tls.crt": []byte("cert 2"), "tls.key": []byte("key 2")})
	for name, want := range map[string]string{"tls.crt": "cert 2", "tls.key": "key 2"} {
		if b, err := os.ReadFile(v.Path(name)); err != nil || !bytes.Equal(b, []byte(want)) {
			t.Errorf("%s after the renewal: %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(v.dir, first)); !os.IsNotExist(err) {
		t.Errorf("the first generation %s is still there (%v)", first, err)
	}
}
