package app

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader serves the data listener's certificate and loads it again when the
// files change (a renewed cert-manager or Kubernetes Secret mount), checking at most
// once a second, on the next handshake. A bad pair keeps the previous one.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // modification times the loaded pair had
	checked time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
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

func (r *certReloader) load() error {
	stamp := r.stampNow()
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("listen.tls: %w", err)
	}
	r.cert, r.stamp = &c, stamp
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= time.Second {
		r.checked = now
		if r.stampNow() != r.stamp {
			old := r.cert
			if err := r.load(); err != nil {
				r.cert = old
				r.log.Error("TLS certificate not reloaded; the previous one stays in use", "error", err.Error())
			} else {
				r.log.Info("TLS certificate reloaded", "certFile", r.certFile)
			}
		}
	}
	return r.cert, nil
}
