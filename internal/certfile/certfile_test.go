package certfile

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/internal/certtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// issue returns a PEM certificate for cn and its PEM key, issued by a CA of its own.
func issue(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	return certtest.NewCA(t, "issuer of "+cn).Issue(t, certtest.Leaf{CN: cn})
}

// Reads racing the kubelet's updates (..data swapped between reading the certificate
// and the key, the old generation removed meanwhile) never take or report a
// mismatched pair: the files are read again.
func TestAPairReadWhileTheSecretIsUpdatedIsNeverMismatched(t *testing.T) {
	var pairs []map[string][]byte
	for i := range 16 {
		c, k := issue(t, fmt.Sprint("gen-", i))
		pairs = append(pairs, map[string][]byte{"tls.crt": c, "tls.key": k})
	}
	s := certtest.NewSecretVolume(t, pairs[0])
	var refused atomic.Int32
	var last atomic.Value
	p, err := NewPair(s.Path("tls.crt"), s.Path("tls.key"), Options{Every: time.Nanosecond, Refused: func(err error) {
		refused.Add(1)
		last.Store(err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	updates := 0
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := s.Update(pairs[i%len(pairs)]); err != nil {
				done <- err
				return
			}
			updates++
			time.Sleep(100 * time.Microsecond) // updates are never back to back
		}
	}()
	seen := map[string]bool{}
	for range 3000 {
		seen[p.Certificate().Leaf.Subject.CommonName] = true
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := refused.Load(); n != 0 {
		t.Fatalf("%d refusals while %d updates of good pairs raced the reads; the last: %v", n, updates, last.Load())
	}
	if len(seen) < 2 {
		t.Fatalf("only %v served over %d updates: the reads did not race them", seen, updates)
	}
	t.Logf("%d updates, %d distinct pairs served, none refused", updates, len(seen))
}

// A renewed pair behind a Secret's symlink swap is served once the interval has
// passed; a mismatched pair (the new certificate, the old key) and a half-written
// certificate are refused, each reported once, and the last good pair stays until the
// files make a good pair again.
func TestAPairIsReloadedAfterASymlinkSwapAndABadOneNeverReplacesIt(t *testing.T) {
	c1, k1 := issue(t, "first")
	s := certtest.NewSecretVolume(t, map[string][]byte{"tls.crt": c1, "tls.key": k1})
	var refused []error
	p, err := NewPair(s.Path("tls.crt"), s.Path("tls.key"), Options{Every: time.Nanosecond, Refused: func(err error) { refused = append(refused, err) }})
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string { return p.Certificate().Leaf.Subject.CommonName }
	if got := cn(); got != "first" {
		t.Fatalf("serving %q, want first", got)
	}

	c2, k2 := issue(t, "second")
	s.Renew(map[string][]byte{"tls.crt": c2, "tls.key": k2})
	if got := cn(); got != "second" {
		t.Fatalf("after the swap: serving %q, want second", got)
	}

	c3, _ := issue(t, "mismatched")
	s.Renew(map[string][]byte{"tls.crt": c3, "tls.key": k2})
	for range 3 {
		if got := cn(); got != "second" {
			t.Fatalf("after a mismatched pair: serving %q, want second (kept)", got)
		}
	}
	if len(refused) != 1 || !errors.Is(refused[0], ErrRefused) {
		t.Fatalf("refusals reported: %v, want one ErrRefused", refused)
	}

	c4, k4 := issue(t, "fourth")
	s.Renew(map[string][]byte{"tls.crt": append(append([]byte{}, c4...), c2[:len(c2)/2]...), "tls.key": k4})
	if got := cn(); got != "second" {
		t.Fatalf("after a half-written chain: serving %q, want second (kept)", got)
	}
	if len(refused) != 2 {
		t.Fatalf("refusals reported: %v, want two", refused)
	}

	s.Renew(map[string][]byte{"tls.crt": c4, "tls.key": k4})
	if got := cn(); got != "fourth" {
		t.Fatalf("after a good pair again: serving %q, want fourth", got)
	}
}

// Files rewritten in place (not through a symlink) are reloaded too, but only once the
// interval has passed since the last check.
func TestAPairIsCheckedAtMostOnceAnInterval(t *testing.T) {
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	c1, k1 := issue(t, "first")
	write := func(c, k []byte) {
		if err := os.WriteFile(cf, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kf, k, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c1, k1)
	p, err := NewPair(cf, kf, Options{Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c2, k2 := issue(t, "second")
	write(c2, k2)
	if got := p.Certificate().Leaf.Subject.CommonName; got != "first" {
		t.Fatalf("within the interval: %q, want first", got)
	}
	if got := p.cert.Get(time.Now().Add(time.Hour)).Leaf.Subject.CommonName; got != "second" {
		t.Fatalf("after the interval: %q, want second", got)
	}
}

// A changed CA bundle is taken; one that holds no certificate, or is cut short, is
// refused and the last good one stays.
func TestRootsAreReloadedAndABadBundleNeverReplacesThem(t *testing.T) {
	ca1 := certtest.NewCA(t, "ca one").CertPEM
	ca2 := certtest.NewCA(t, "ca two").CertPEM
	s := certtest.NewSecretVolume(t, map[string][]byte{"ca.crt": ca1})
	refusals := 0
	r, err := NewRoots(s.Path("ca.crt"), Options{Every: time.Nanosecond, Refused: func(error) { refusals++ }})
	if err != nil {
		t.Fatal(err)
	}
	holds := func(ca []byte) bool {
		b, _ := pem.Decode(ca)
		c, _ := x509.ParseCertificate(b.Bytes)
		_, err := c.Verify(x509.VerifyOptions{Roots: r.Pool()})
		return err == nil
	}
	if !holds(ca1) || holds(ca2) {
		t.Fatal("the first bundle is not the one used")
	}
	s.Renew(map[string][]byte{"ca.crt": ca2})
	if holds(ca1) || !holds(ca2) {
		t.Fatal("the second bundle is not the one used after the swap")
	}
	s.Renew(map[string][]byte{"ca.crt": []byte("not a bundle\n")})
	if !holds(ca2) || refusals != 1 {
		t.Fatalf("after an empty bundle: second kept %v, %d refusals, want true and 1", holds(ca2), refusals)
	}
	s.Renew(map[string][]byte{"ca.crt": append(append([]byte{}, ca1...), ca2[:len(ca2)/2]...)})
	if !holds(ca2) || holds(ca1) || refusals != 2 {
		t.Fatalf("after a half-written bundle: second kept %v, %d refusals, want true and 2", holds(ca2), refusals)
	}
}

// Files that do not make a pair at the start are NewPair's error, naming them.
func TestNewPairNamesTheFilesItCouldNotUse(t *testing.T) {
	dir := t.TempDir()
	c1, _ := issue(t, "first")
	_, k2 := issue(t, "second")
	cf, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	_ = os.WriteFile(cf, c1, 0o600)
	_ = os.WriteFile(kf, k2, 0o600)
	if _, err := NewPair(cf, kf, Options{}); err == nil || !strings.Contains(err.Error(), cf) {
		t.Fatalf("NewPair with a mismatched pair: %v, want an error naming %s", err, cf)
	}
}
