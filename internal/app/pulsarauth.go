package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/oauth2"
)

// oauth2StartTimeout bounds the discovery and the first token request at start-up.
const oauth2StartTimeout = 30 * time.Second

// pulsarAuth sets the client's credentials from pulsar.token, pulsar.oauth2 or
// pulsar.tls.authenticate, and returns the OAuth2 token source when there is one (nil
// otherwise).
func pulsarAuth(cfg config.Pulsar, copts *pulsar.ClientOptions, log *slog.Logger) (*oauth2.Source, error) {
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
		src, err := oauth2.New(ctx, oauth2.Options{IssuerURL: cfg.OAuth2.IssuerURL, ClientID: kf.ClientID, ClientSecret: kf.ClientSecret,
			Audience: cfg.OAuth2.Audience, Scope: cfg.OAuth2.Scope, HTTPClient: hc, Logger: log})
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
