package otlpwire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// Protocol is the transport an Exporter sends over.
type Protocol string

const (
	ProtocolGRPC Protocol = "grpc"
	ProtocolHTTP Protocol = "http/protobuf"
)

// Config says where and how an Exporter sends. FromEnv builds it from the environment.
type Config struct {
	Protocol Protocol
	// Endpoint is, for ProtocolHTTP, the full URL spans are POSTed to
	// (https://localhost:4318/v1/traces by default); for ProtocolGRPC, the gRPC target
	// (localhost:4317 by default).
	Endpoint string
	// Insecure is plain text for gRPC (for HTTP the URL's scheme says it).
	Insecure bool
	// TLS is the client's TLS configuration (nil: the system's roots).
	TLS         *tls.Config
	Headers     map[string]string
	Timeout     time.Duration // of each export, retries included (default 10s)
	Compression string        // "gzip" or "" (none)
	Retry       Retry
	// MaxRequestBytes refuses a larger encoded request, as the official exporters do
	// (0: their 64 MiB).
	MaxRequestBytes int
}

// Retry is the backoff of temporary failures, as the official exporters do it.
type Retry struct {
	Enabled         bool
	InitialInterval time.Duration
	MaxInterval     time.Duration
	// MaxElapsedTime bounds the retries of one export besides its ctx (0: the ctx only).
	MaxElapsedTime time.Duration
}

// DefaultRetry is the official exporters' retry: 5s doubling by 1.5 up to 30s, for at
// most a minute, with ±50 % jitter.
var DefaultRetry = Retry{Enabled: true, InitialInterval: 5 * time.Second, MaxInterval: 30 * time.Second, MaxElapsedTime: time.Minute}

const (
	defaultTimeout    = 10 * time.Second
	defaultHTTPHost   = "localhost:4318"
	defaultGRPCTarget = "localhost:4317"
	defaultTracesPath = "/v1/traces"
	envPrefix         = "OTEL_EXPORTER_OTLP_"
	tracesEnvPrefix   = envPrefix + "TRACES_"
	maxResponseBytes  = 4 << 20
	defaultMaxRequest = 64 << 20
	// keptBufferBytes is the largest request buffer kept between exports.
	keptBufferBytes    = 4 << 20
	maxErrorBodyInText = 1 << 10
)

// ErrConfig is the error of every variable FromEnv refuses.
var ErrConfig = errors.New("otlpwire: configuration")

func configErr(name, value, want string) error {
	return fmt.Errorf("%w: %s %q: %s", ErrConfig, name, value, want)
}

// supported are the OTEL_EXPORTER_OTLP_ variables FromEnv reads, each also with TRACES_.
var supported = []string{"ENDPOINT", "PROTOCOL", "HEADERS", "TIMEOUT", "COMPRESSION", "INSECURE", "CERTIFICATE",
	"CLIENT_CERTIFICATE", "CLIENT_KEY"}

// FromEnv reads the variables the official OTLP trace exporters read, with their defaults
// and precedence (OTEL_EXPORTER_OTLP_TRACES_X over OTEL_EXPORTER_OTLP_X):
// ENDPOINT, PROTOCOL (grpc, the default, or http/protobuf), HEADERS, TIMEOUT
// (milliseconds), COMPRESSION (gzip or none), INSECURE, CERTIFICATE, CLIENT_CERTIFICATE
// and CLIENT_KEY. Where the official exporters log a value they cannot use and go on
// without it, FromEnv fails naming it; so it does for an OTEL_EXPORTER_OTLP_TRACES_
// variable it does not know, and for an OTEL_EXPORTER_OTLP_ one that is not another
// signal's (METRICS_, LOGS_, PROFILES_).
func FromEnv() (Config, error) {
	return fromEnv(os.Getenv, os.Environ(), os.ReadFile)
}

func fromEnv(getenv func(string) string, environ []string, readFile func(string) ([]byte, error)) (Config, error) {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if err := checkKnown(name); err != nil {
			return Config{}, err
		}
	}
	cfg := Config{Protocol: ProtocolGRPC, Timeout: defaultTimeout, Retry: DefaultRetry}
	// get returns the per-signal variable if set, else the generic one, with its name.
	get := func(key string) (name, value string, ok bool) {
		for _, n := range []string{tracesEnvPrefix + key, envPrefix + key} {
			if v := strings.TrimSpace(getenv(n)); v != "" {
				return n, v, true
			}
		}
		return "", "", false
	}
	if n, v, ok := get("PROTOCOL"); ok {
		switch v {
		case "grpc":
			cfg.Protocol = ProtocolGRPC
		case "http/protobuf":
			cfg.Protocol = ProtocolHTTP
		default:
			return Config{}, configErr(n, v, "the wire exporter speaks grpc or http/protobuf")
		}
	}
	// Endpoint: the signal's URL as it is (path / if none), or the generic one as a base
	// with /v1/traces; its scheme decides plain text (http, unix) or TLS, and INSECURE,
	// read after it, overrides that, as in the official exporters.
	insecure := false
	httpHost, httpPath, grpcTarget := defaultHTTPHost, defaultTracesPath, defaultGRPCTarget
	for _, signal := range []bool{false, true} {
		n := envPrefix + "ENDPOINT"
		if signal {
			n = tracesEnvPrefix + "ENDPOINT"
		}
		v := strings.TrimSpace(getenv(n))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			return Config{}, configErr(n, v, err.Error())
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "unix":
			insecure = true
		default:
			insecure = false
		}
		httpHost = u.Host
		if signal {
			httpPath = u.Path
			if httpPath == "" {
				httpPath = "/"
			}
		} else {
			httpPath = path.Join(u.Path, defaultTracesPath)
		}
		grpcTarget = u.String()
		switch strings.ToLower(u.Scheme) {
		case "http", "https":
			grpcTarget = u.Host
		case "":
			if u.Host != "" {
				grpcTarget = path.Join(u.Host, u.Path)
			}
		}
		if cfg.Protocol == ProtocolHTTP && u.Host == "" {
			return Config{}, configErr(n, v, "want a URL such as http://collector:4318")
		}
	}
	for _, n := range []string{envPrefix + "INSECURE", tracesEnvPrefix + "INSECURE"} {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, configErr(n, v, "want true or false")
			}
			insecure = b
		}
	}
	cfg.Insecure = insecure
	if cfg.Protocol == ProtocolHTTP {
		scheme := "https"
		if insecure {
			scheme = "http"
		}
		cfg.Endpoint = (&url.URL{Scheme: scheme, Host: httpHost, Path: httpPath}).String()
	} else {
		cfg.Endpoint = grpcTarget
	}
	if n, v, ok := get("HEADERS"); ok {
		h, err := parseHeaders(v)
		if err != nil {
			return Config{}, configErr(n, v, err.Error())
		}
		cfg.Headers = h
	}
	if n, v, ok := get("TIMEOUT"); ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 || int64(ms) > int64(math.MaxInt64/time.Millisecond) {
			return Config{}, configErr(n, v, "want a positive number of milliseconds, at most 9223372036854")
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}
	if n, v, ok := get("COMPRESSION"); ok {
		switch v {
		case "gzip":
			cfg.Compression = "gzip"
		case "none":
		default:
			return Config{}, configErr(n, v, "want gzip or none")
		}
	}
	var tc *tls.Config
	if n, v, ok := get("CERTIFICATE"); ok {
		pem, err := readFile(v)
		if err != nil {
			return Config{}, configErr(n, v, err.Error())
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Config{}, configErr(n, v, "no PEM certificate in the file")
		}
		tc = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// The client certificate and key: the per-signal pair if both are set, else the generic.
	for _, p := range []string{tracesEnvPrefix, envPrefix} {
		cn, kn := p+"CLIENT_CERTIFICATE", p+"CLIENT_KEY"
		cv, kv := strings.TrimSpace(getenv(cn)), strings.TrimSpace(getenv(kn))
		if cv == "" && kv == "" {
			continue
		}
		if cv == "" || kv == "" {
			return Config{}, configErr(cn+" and "+kn, cv+" "+kv, "set both or neither")
		}
		cert, err := readFile(cv)
		if err != nil {
			return Config{}, configErr(cn, cv, err.Error())
		}
		key, err := readFile(kv)
		if err != nil {
			return Config{}, configErr(kn, kv, err.Error())
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return Config{}, configErr(cn, cv, err.Error())
		}
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.Certificates = []tls.Certificate{pair}
		break
	}
	cfg.TLS = tc
	return cfg, nil
}

func checkKnown(name string) error {
	rest, ok := strings.CutPrefix(name, envPrefix)
	if !ok {
		return nil
	}
	if r, ok := strings.CutPrefix(rest, "TRACES_"); ok {
		rest = r
	} else if strings.HasPrefix(rest, "METRICS_") || strings.HasPrefix(rest, "LOGS_") || strings.HasPrefix(rest, "PROFILES_") {
		return nil
	}
	for _, s := range supported {
		if rest == s {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not a variable the wire exporter supports (it reads %s[TRACES_]{%s})",
		ErrConfig, name, envPrefix, strings.Join(supported, ","))
}

// parseHeaders parses key=value pairs separated by commas, values URL-decoded, as the
// specification says; a malformed pair is an error.
func parseHeaders(v string) (map[string]string, error) {
	h := map[string]string{}
	for pair := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderKey(k) {
			return nil, fmt.Errorf("%q is not key=value with a token key", pair)
		}
		d, err := url.PathUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", pair, err)
		}
		h[k] = strings.TrimSpace(d)
	}
	return h, nil
}

func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
