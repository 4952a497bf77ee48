// Package certfile keeps TLS material read from files current while the process runs:
// a certificate with its key (Pair) and a bundle of trusted CAs (Roots). Renewed files
// (a cert-manager Secret, whose mounted directory swaps its ..data symlink atomically)
// are taken on the next handshake, checked at most once an interval (internal/reread).
// Changed files that do not make a usable value (a half-written or mismatched pair, a
// bundle without a certificate) never replace the last good one: they are logged and
// reported once, and read again until they do.
package certfile

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/recordio-bridge/bridge/internal/reread"
)

// ErrRefused wraps the reason changed files were not taken (the last good value stays).
var ErrRefused = errors.New("certfile: changed files refused")

// Options configure NewPair and NewRoots. Zero values take the defaults in brackets.
type Options struct {
	// Every is how often the files are checked, on use [1 s].
	Every time.Duration
	// Logger logs what was reloaded and what was refused [discarded].
	Logger *slog.Logger
	// Refused, when set, is called once for each changed content refused (the last good
	// value stays in use): to count it.
	Refused func(error)
}

func (o *Options) defaults() {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// watched is what Pair and Roots share: the content last taken, the last refused, and
// the reporting of a refusal.
type watched struct {
	o       Options
	what    string   // "TLS certificate", "TLS CA bundle": for the log
	files   []string // read in this order
	last    []byte   // the files' content as last taken
	refused [32]byte // hash of the content last refused (reported once)
}

// errChanging: the files changed on every read; they are read again on next use.
var errChanging = errors.New("the files changed while they were read")

// read returns the files' content, concatenated with a separator. A Secret volume's
// update swaps ..data between two reads, or removes the old generation while a path
// through it is resolved: the files are read again when the first one changed while the
// others were read, or one could not be read, a few times before an error is returned
// (errChanging when the reads never agreed).
func (w *watched) read() ([][]byte, []byte, error) {
	err := errChanging
	for range 3 {
		var parts [][]byte
		if parts, err = w.readOnce(); err != nil {
			continue
		}
		if len(w.files) > 1 {
			if again, err2 := os.ReadFile(w.files[0]); err2 != nil || !bytes.Equal(again, parts[0]) {
				err = errChanging
				continue
			}
		}
		return parts, bytes.Join(parts, []byte{0}), nil
	}
	return nil, nil, err
}

func (w *watched) readOnce() ([][]byte, error) {
	parts := make([][]byte, 0, len(w.files))
	for _, f := range w.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		parts = append(parts, b)
	}
	return parts, nil
}

// fail reports err for content unless that content was reported already.
func (w *watched) fail(content []byte, err error) error {
	err = fmt.Errorf("%w: %s %v: %w", ErrRefused, w.what, w.files, err)
	if h := sha256.Sum256(content); h != w.refused {
		w.refused = h
		w.o.Logger.Error(w.what+" not reloaded; the previous one stays in use", "files", w.files, "error", err.Error())
		if w.o.Refused != nil {
			w.o.Refused(err)
		}
	}
	return err
}

// Pair is a certificate and its key read from two PEM files, kept current.
type Pair struct {
	w    watched
	cert *reread.Every[*tls.Certificate]
	cur  *tls.Certificate // written by load only (reread runs one load at a time)
}

// NewPair reads the pair; it failing is NewPair's error.
func NewPair(certFile, keyFile string, o Options) (*Pair, error) {
	o.defaults()
	p := &Pair{w: watched{o: o, what: "TLS certificate", files: []string{certFile, keyFile}}}
	parts, content, err := p.w.read()
	if err != nil {
		return nil, err
	}
	c, err := parsePair(parts[0], parts[1])
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	p.cur, p.w.last = c, content
	if p.cert, err = reread.New(o.Every, time.Now(), p.load); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pair) load() (*tls.Certificate, error) {
	parts, content, err := p.w.read()
	if errors.Is(err, errChanging) {
		return nil, err // an update under way: the last pair is kept, read again on next use
	}
	if err != nil {
		return nil, p.w.fail([]byte(err.Error()), err)
	}
	if bytes.Equal(content, p.w.last) {
		return p.cur, nil
	}
	c, err := parsePair(parts[0], parts[1])
	if err != nil {
		return nil, p.w.fail(content, err)
	}
	p.cur, p.w.last = c, content
	p.w.o.Logger.Info("TLS certificate reloaded", "certFile", p.w.files[0], "subject", c.Leaf.Subject.String(),
		"notAfter", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return c, nil
}

// parsePair checks that the certificate file holds whole certificates only (a
// half-written chain is refused, not cut short) and that the key is the leaf's.
func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	if err := wholePEM(certPEM); err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// wholePEM fails when PEM text is cut short: a block begun and not ended.
func wholePEM(b []byte) error {
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return errors.New("a PEM block is not whole (the file is half-written?)")
	}
	return nil
}

// Certificate is the pair as of now.
func (p *Pair) Certificate() *tls.Certificate { return p.cert.Get(time.Now()) }

// GetCertificate is tls.Config.GetCertificate.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.Certificate(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate: the pair is sent whatever
// CAs the server names, as it is with one certificate in tls.Config.Certificates.
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.Certificate(), nil
}

// Roots is a bundle of trusted CA certificates read from a PEM file, kept current.
type Roots struct {
	w    watched
	pool *reread.Every[*x509.CertPool]
	cur  *x509.CertPool // written by load only
}

// NewRoots reads the bundle; it failing is NewRoots's error.
func NewRoots(file string, o Options) (*Roots, error) {
	o.defaults()
	r := &Roots{w: watched{o: o, what: "TLS CA bundle", files: []string{file}}}
	_, content, err := r.w.read()
	if err != nil {
		return nil, err
	}
	pool, err := parseRoots(content)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	r.cur, r.w.last = pool, content
	if r.pool, err = reread.New(o.Every, time.Now(), r.load); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Roots) load() (*x509.CertPool, error) {
	_, content, err := r.w.read()
	if err != nil {
		return nil, r.w.fail([]byte(err.Error()), err)
	}
	if bytes.Equal(content, r.w.last) {
		return r.cur, nil
	}
	pool, err := parseRoots(content)
	if err != nil {
		return nil, r.w.fail(content, err)
	}
	r.cur, r.w.last = pool, content
	r.w.o.Logger.Info("TLS CA bundle reloaded", "caFile", r.w.files[0])
	return pool, nil
}

// parseRoots takes every certificate of a bundle, refusing one that holds none, one
// that does not parse, or a half-written one.
func parseRoots(b []byte) (*x509.CertPool, error) {
	if err := wholePEM(b); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// Pool is the bundle as of now.
func (r *Roots) Pool() *x509.CertPool { return r.pool.Get(time.Now()) }
