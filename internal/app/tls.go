package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/recordio-bridge/bridge/internal/reread"
)

// certReloader serves the data listener's certificate and loads it again when the
// files change (a renewed cert-manager or Kubernetes Secret mount), checking at most
// once a second, on the next handshake (reread). A bad pair keeps the previous one.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	pair              *reread.Every[loadedPair]
	last              loadedPair // written by load only (reread runs one load at a time)
}

// loadedPair is a certificate with the files' modification times and sizes it was
// loaded at.
type loadedPair struct {
	cert  *tls.Certificate
	stamp string
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	pair, err := reread.New(time.Second, time.Now(), r.load)
	if err != nil {
		return nil, err
	}
	r.pair = pair
	return r, nil
}

func (r *certReloader) stampNow() string {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		if st, err := os.Stat(f); err == nil {
			s += st.ModTime().String() + fmt.Sprint(st.Size()) + ";"
		}
	}
	return s
}

// load loads the pair when its files changed since the last load (the first time
// always), logging a reload or a failed one after the first.
func (r *certReloader) load() (loadedPair, error) {
	stamp := r.stampNow()
	if r.last.cert != nil && stamp == r.last.stamp {
		return r.last, nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.last.cert != nil {
			r.log.Error("TLS certificate not reloaded; the previous one stays in use", "error", err.Error())
		}
		return loadedPair{}, fmt.Errorf("listen.tls: %w", err)
	}
	if r.last.cert != nil {
		r.log.Info("TLS certificate reloaded", "certFile", r.certFile)
	}
	r.last = loadedPair{cert: &c, stamp: stamp}
	return r.last, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.pair.Get(time.Now()).cert, nil
}
