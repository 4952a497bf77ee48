package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/oauth2"
)

// oauth2StartTimeout bounds the discovery and the first token request at start-up.
const oauth2StartTimeout = 30 * time.Second

// pulsarAuth sets the client's credentials from pulsar.token, pulsar.oauth2 or
// pulsar.tls.authenticate, and returns the OAuth2 token source when there is one (nil
// otherwise). A credentials file (pulsar.oauth2.privateKey: file:) is read again before
// every token request; refused is called when it no longer holds credentials.
func pulsarAuth(cfg config.Pulsar, copts *pulsar.ClientOptions, log *slog.Logger, refused func(error)) (*oauth2.Source, error) {
	if cfg.TLS.Authenticate {
		copts.Auth = pulsar.TLSAuthentication()
		return nil, nil
	}
	if cfg.OAuth2.On() {
		raw, err := cfg.OAuth2.PrivateKey.Resolve()
		if err != nil {
			return nil, fmt.Errorf("pulsar.oauth2.privateKey: %w", err)
		}
		kf, err := oauth2.ParseKeyFile([]byte(raw))
		if err != nil {
			return nil, fmt.Errorf("pulsar.oauth2.privateKey: %w", err)
		}
		var hc *http.Client
		if cfg.OAuth2.CAFile != "" {
			pool, err := config.LoadCAFile(cfg.OAuth2.CAFile)
			if err != nil {
				return nil, fmt.Errorf("pulsar.oauth2.caFile: %w", err)
			}
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			hc = &http.Client{Timeout: 30 * time.Second, Transport: tr}
		}
		ctx, cancel := context.WithTimeout(context.Background(), oauth2StartTimeout)
		defer cancel()
		o := oauth2.Options{IssuerURL: cfg.OAuth2.IssuerURL, ClientID: kf.ClientID, ClientSecret: kf.ClientSecret,
			Audience: cfg.OAuth2.Audience, Scope: cfg.OAuth2.Scope, HTTPClient: hc, Logger: log}
		if f := cfg.OAuth2.PrivateKey.File(); f != "" {
			o.Credentials = func() (oauth2.KeyFile, error) { return readKeyFile(f) }
			o.CredentialsRefused = refused
		}
		src, err := oauth2.New(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("pulsar.oauth2: %w", err)
		}
		copts.Auth = src
		return src, nil
	}
	token, err := cfg.Token.Resolve()
	if err != nil {
		return nil, fmt.Errorf("pulsar.token: %w", err)
	}
	if f := cfg.Token.File(); f != "" {
		copts.TokenFile = f
	} else {
		copts.Token = token
	}
	return nil, nil
}

// readKeyFile reads an OAuth2 credentials file; its errors name the key and the file,
// never the content.
func readKeyFile(path string) (oauth2.KeyFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return oauth2.KeyFile{}, fmt.Errorf("pulsar.oauth2.privateKey: %w", err)
	}
	k, err := oauth2.ParseKeyFile(b)
	if err != nil {
		return k, fmt.Errorf("pulsar.oauth2.privateKey %s: %w", path, err)
	}
	return k, nil
}

// authReady adds the state of the Pulsar credentials to /readyz's detail and reports
// whether they can authenticate a new connection.
func (a *App) authReady(detail map[string]any) bool {
	if a.oauth2 == nil {
		return true
	}
	expiry, err := a.oauth2.Status()
	if err != nil {
		detail["pulsarAuth"] = "no valid OAuth2 token: " + err.Error()
		return false
	}
	if expiry.IsZero() {
		detail["pulsarAuth"] = "OAuth2 token valid"
	} else {
		detail["pulsarAuth"] = "OAuth2 token valid until " + expiry.UTC().Format(time.RFC3339)
	}
	return true
}
