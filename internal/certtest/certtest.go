// Package certtest makes what tests of certificate loading and rotation need: a CA that
// issues client and server certificates, made for the test or read from a broker's
// files, and a directory laid out as Kubernetes mounts a Secret, renewed as the kubelet
// renews it.
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for tests.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA makes a CA named cn, with an ECDSA P-256 key, valid from an hour ago for two hours.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// LoadCA reads a CA from its PEM certificate and PEM key (PKCS #8 or PKCS #1), as a
// broker's test set-up leaves them.
func LoadCA(t testing.TB, certFile, keyFile string) *CA {
	t.Helper()
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatalf("the CA files %s and %s hold no PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var key any
	if key, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
			t.Fatalf("the CA key %s: neither PKCS #8 nor PKCS #1: %v", keyFile, err)
		}
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		t.Fatalf("the CA key %s is a %T, which cannot sign", keyFile, key)
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}
}

// Leaf describes a certificate for a CA to issue.
type Leaf struct {
	CN string
	// Server makes a server's certificate for 127.0.0.1 (ExtKeyUsageServerAuth); a
	// client's (ExtKeyUsageClientAuth) otherwise.
	Server bool
	// NotBefore and NotAfter bound its validity; zero: from an hour ago, to an hour from now.
	NotBefore, NotAfter time.Time
}

// Issue issues l with a new ECDSA P-256 key and returns the certificate and its key
// (PKCS #8) in PEM.
func (ca *CA) Issue(t testing.TB, l Leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: l.CN}, NotBefore: l.NotBefore, NotAfter: l.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(time.Hour)
	}
	if l.Server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// IssuePair is Issue, the certificate and key also as a tls.Certificate.
func (ca *CA) IssuePair(t testing.TB, l Leaf) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	certPEM, keyPEM = ca.Issue(t, l)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

// IssueFiles is Issue, the certificate and key written to client.crt and client.key
// in a directory of the test's own.
func (ca *CA) IssueFiles(t testing.TB, l Leaf) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, l)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

var serials atomic.Int64

// serial is a serial number no other certificate of this process has: two issued in
// the same nanosecond would otherwise share one.
func serial() *big.Int { return big.NewInt(time.Now().UnixNano() + serials.Add(1)) }

// SecretVolume is a directory laid out as the kubelet mounts a Secret (cert-manager's
// tls.crt, tls.key, ca.crt): each name a symlink to ..data/name, ..data a symlink to
// the current generation's directory, swapped at once on an update, the previous
// generation then removed.
type SecretVolume struct {
	t   testing.TB
	dir string
	gen int
}

// NewSecretVolume mounts files (name -> content) as a Secret's first generation.
func NewSecretVolume(t testing.TB, files map[string][]byte) *SecretVolume {
	t.Helper()
	v := &SecretVolume{t: t, dir: t.TempDir()}
	v.Renew(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// Path is the path of the file name, as a program given the mount reads it.
func (v *SecretVolume) Path(name string) string { return filepath.Join(v.dir, name) }

// Renew writes files as a new generation and swaps ..data to it; it fails the test on
// an error, so it is for the test's own goroutine (Update is for others).
func (v *SecretVolume) Renew(files map[string][]byte) {
	v.t.Helper()
	if err := v.Update(files); err != nil {
		v.t.Fatal(err)
	}
}

// Update writes files as a new generation, swaps ..data to it and removes the previous
// one, as the kubelet does. It is not safe for concurrent use.
func (v *SecretVolume) Update(files map[string][]byte) error {
	v.gen++
	gen := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o700); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, gen, name), b, 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(v.dir, old))
	}
	return nil
}
