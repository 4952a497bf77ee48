package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the bridge's configuration. Field comments give each key's default.
type Config struct {
	Listen  Listen  `yaml:"listen"`
	Pulsar  Pulsar  `yaml:"pulsar"`
	Ingress Ingress `yaml:"ingress"`
	Egress  Egress  `yaml:"egress"`
	Memory  Memory  `yaml:"memory"`
	Auth    Auth    `yaml:"auth"`
	Tracing Tracing `yaml:"tracing"`
	Routes  []Route `yaml:"routes"` // none: every POST gets 404
	// Streams are the egress endpoints; none: every GET gets 404.
	Streams []Stream `yaml:"streams"`
}

// Listen holds the listener addresses.
type Listen struct {
	Data string `yaml:"data"` // 127.0.0.1:8080: ingress and egress
	Ops  string `yaml:"ops"`  // 127.0.0.1:9090: /healthz, /readyz, /metrics
	// Pprof serves net/http/pprof's /debug/pprof/ on the ops listener.
	Pprof bool `yaml:"pprof"` // false
	// TLS on the data listener (HTTP/1.1 and HTTP/2); the files are re-read when they change.
	TLS ListenTLS `yaml:"tls"` // off
}

// ListenTLS names the data listener's certificate and key (PEM).
type ListenTLS struct {
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// Pulsar holds the broker connection.
type Pulsar struct {
	URL              string   `yaml:"url"`              // pulsar://127.0.0.1:6650
	Token            Secret   `yaml:"token"`            // none; env:NAME or file:/path (a file is re-read on AUTH_CHALLENGE)
	OAuth2           OAuth2   `yaml:"oauth2"`           // off: OAuth 2.0 client credentials instead of a token
	TLS              TLS      `yaml:"tls"`              // used with pulsar+ssl://
	OperationTimeout Duration `yaml:"operationTimeout"` // 30s: lookups, producer and consumer creation
	KeepAlive        Duration `yaml:"keepAlive"`        // 30s
	WriteTimeout     Duration `yaml:"writeTimeout"`     // 30s: a broker that stops reading for this long is dropped
	// Compression of what the bridge publishes: none, lz4, zlib, zstd or snappy.
	Compression string `yaml:"compression"` // none
	// HashingScheme picks the partition of a keyed message, as the Java client computes it:
	// javaString (JavaStringHash, its default) or murmur3 (Murmur3_32Hash).
	HashingScheme string `yaml:"hashingScheme"` // javaString
	// ProducerIdleTimeout closes the producer of a topic no stream has used for this long.
	ProducerIdleTimeout Duration `yaml:"producerIdleTimeout"` // 10m
	// MaxProducers caps the live producers (one per topic a templated route reaches); a
	// new topic at the cap closes the idle producer used least recently, or waits.
	MaxProducers int `yaml:"maxProducers"` // 1000
	// NamedStreamAccessMode is the access mode of named streams' producers: shared, or
	// exclusiveWithFencing, with which a request taking a named stream over from another
	// bridge process fences that process's producers of it at once, and each named
	// stream's producer has its topic to itself while open (see the exactly-once docs).
	NamedStreamAccessMode string `yaml:"namedStreamAccessMode"` // shared
}

// Memory bounds the process as a whole (see docs/operations.md, the memory model).
type Memory struct {
	// Budget bounds the bytes the bridge holds for its clients, across every stream:
	// records read from ingress bodies and not yet receipted (ingress stops reading when
	// it is spent) and messages handed to egress streams and not yet acknowledged.
	Budget Size `yaml:"budget"` // 128MiB
	// Limit is the Go runtime's soft memory limit (GOMEMLIMIT); 0 takes 90 % of the
	// POD_MEMORY_LIMIT environment variable (the container's limit in bytes) when set.
	// A GOMEMLIMIT environment variable wins over both.
	Limit Size `yaml:"limit"` // 0
}

// Tracing holds the bridge's own tracing settings. Whether tracing is on, the exporter's
// endpoint and protocol and the sampler stay the standard OTEL_* environment variables
// (see docs/tracing.md). Every tracing key takes effect at start-up: a reload that changes
// one logs that it needs a restart (RestartNeeded).
type Tracing struct {
	// SegmentRecords ends a stream's segment span after this many records.
	SegmentRecords int64 `yaml:"segmentRecords"` // 10000
	// SegmentInterval ends a stream's segment span after this long, records or not.
	SegmentInterval Duration `yaml:"segmentInterval"` // 1m
	// PropagateUnsampled puts an unsampled record's context (flag not sampled) in its
	// message too; by default only sampled records' messages carry one.
	PropagateUnsampled bool `yaml:"propagateUnsampled"` // false
	// Exporter and RecordSpans chose between span pipelines the bridge no longer has:
	// spans are always made by the SDK's tracer and encoded by the bridge's own OTLP
	// exporter. A configuration that still names either is refused (removedTracingKeys).
	Exporter    Removed `yaml:"exporter"`
	RecordSpans Removed `yaml:"recordSpans"`
}

// Removed is a key the bridge no longer reads: written in a configuration, whatever its
// value, it makes Validate refuse it, saying what to do instead, rather than the
// decoder's bare "field not found".
type Removed struct{ set bool }

// UnmarshalYAML notes that the key was written.
func (r *Removed) UnmarshalYAML(*yaml.Node) error {
	r.set = true
	return nil
}

// Set says whether the key was written.
func (r Removed) Set() bool { return r.set }

// removedTracingKeys are the tracing keys that were removed, with what to do instead.
func removedTracingKeys(t Tracing) [][2]string {
	var out [][2]string
	if t.Exporter.Set() {
		out = append(out, [2]string{"tracing.exporter", "spans are always encoded by the bridge's own OTLP exporter now (what exporter: wire chose); " +
			"delete the key (protocol, endpoint and the rest stay OTEL_EXPORTER_OTLP_* variables)"})
	}
	if t.RecordSpans.Set() {
		out = append(out, [2]string{"tracing.recordSpans", "record spans are always made by the OpenTelemetry SDK's tracer now (what recordSpans: sdk chose); delete the key"})
	}
	return out
}

// RetiredEnv maps each environment variable the bridge no longer reads to the YAML key
// that replaced it. Validate (so start-up, every reload and `bridge validate`) refuses
// a configuration while one is set to a value, so nobody loses a setting unawares.
var RetiredEnv = []struct{ Name, Key string }{
	{"BRIDGE_TRACE_SEGMENT_RECORDS", "tracing.segmentRecords"},
	{"BRIDGE_TRACE_SEGMENT_INTERVAL", "tracing.segmentInterval"},
	{"BRIDGE_TRACE_PROPAGATE_UNSAMPLED", "tracing.propagateUnsampled"},
}

// OAuth2 configures OAuth 2.0 client credentials to Pulsar, as the Java client's
// AuthenticationOAuth2: the access token is sent as a token (auth method "token").
type OAuth2 struct {
	// IssuerURL: its discovery document (IssuerURL/.well-known/openid-configuration)
	// names the token endpoint.
	IssuerURL string `yaml:"issuerUrl"` // none: OAuth2 off
	// PrivateKey holds the credentials, {"client_id": ..., "client_secret": ...}, read at start-up.
	PrivateKey Secret `yaml:"privateKey"` // none; file:/path or env:NAME
	Audience   string `yaml:"audience"`   // none: not sent
	Scope      string `yaml:"scope"`      // none: not sent
	// CAFile holds the PEM certificates of the CAs trusted for the issuer's https
	// (a private PKI), instead of the system roots.
	CAFile string `yaml:"caFile"` // system roots
}

// On reports whether OAuth2 is configured (any key set).
func (o OAuth2) On() bool { return o != OAuth2{} }

// TLS configures pulsar+ssl:// connections.
type TLS struct {
	CAFile     string `yaml:"caFile"`     // system roots
	CertFile   string `yaml:"certFile"`   // none
	KeyFile    string `yaml:"keyFile"`    // none
	ServerName string `yaml:"serverName"` // the URL's host
	// Authenticate makes the client certificate the bridge's identity (auth method "tls",
	// as the Java client's AuthenticationTls); otherwise it is only presented.
	Authenticate bool `yaml:"authenticate"` // false
}

// Ingress holds the limits of publishing streams.
type Ingress struct {
	MaxRecordBytes Size `yaml:"maxRecordBytes"` // 4MiB: larger records are refused with 413
	// BufferRecordBytes: records up to this size are held in memory (and can be routed by
	// their JSON fields); larger ones, up to maxRecordBytes, are streamed from the request
	// into chunked Pulsar messages without being held whole.
	BufferRecordBytes Size     `yaml:"bufferRecordBytes"` // 4MiB
	MaxStreams        int      `yaml:"maxStreams"`        // 1000 concurrent streams; more get 429
	IdleTimeout       Duration `yaml:"idleTimeout"`       // 5m without a byte ends a stream
	PublishTimeout    Duration `yaml:"publishTimeout"`    // 30s for the broker to persist a record
	PendingRecords    int      `yaml:"pendingRecords"`    // 4096 records awaiting receipts per stream
	PendingBytes      Size     `yaml:"pendingBytes"`      // 16MiB awaiting receipts per stream
	DrainTimeout      Duration `yaml:"drainTimeout"`      // 30s on SIGTERM
}

// Default returns the configuration used for every key a file leaves out.
func Default() Config {
	return Config{
		Listen: Listen{Data: "127.0.0.1:8080", Ops: "127.0.0.1:9090"},
		Pulsar: Pulsar{URL: "pulsar://127.0.0.1:6650", OperationTimeout: Duration(30 * time.Second), KeepAlive: Duration(30 * time.Second),
			WriteTimeout: Duration(30 * time.Second), Compression: "none", HashingScheme: "javaString", ProducerIdleTimeout: Duration(10 * time.Minute), MaxProducers: 1000,
			NamedStreamAccessMode: "shared"},
		Ingress: Ingress{
			MaxRecordBytes: 4 << 20, BufferRecordBytes: 4 << 20, MaxStreams: 1000, IdleTimeout: Duration(5 * time.Minute), PublishTimeout: Duration(30 * time.Second),
			PendingRecords: 4096, PendingBytes: 16 << 20, DrainTimeout: Duration(30 * time.Second),
		},
		Egress:  Egress{MaxStreams: 1000, WriteTimeout: Duration(30 * time.Second)},
		Memory:  Memory{Budget: 128 << 20},
		Tracing: Tracing{SegmentRecords: 10000, SegmentInterval: Duration(time.Minute)},
	}
}

// ErrInvalid is wrapped by every error Load and Validate return.
var ErrInvalid = errors.New("invalid configuration")

// Check is a check of a decoded configuration that Parse runs after its own (the
// templates' compilation, the start-up environment). A Problems error is merged into
// Parse's; any other error is one problem, its key path read from its text.
type Check func(Config) error

// Parse decodes YAML strictly over the defaults, validates the result and runs the
// checks, and returns every problem of all of them at once (Problems, wrapping
// ErrInvalid), each with its key's full path and line: a key whose value cannot be
// decoded is reported and the rest of the file is still decoded and checked.
func Parse(data []byte, checks ...Check) (Config, error) {
	cfg := Default()
	lines, decoding := decodeFile(data, &cfg)
	if len(decoding) == 1 && decoding[0].Path == "" { // a syntax error: nothing was decoded
		return Config{}, decoding
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first, extra yaml.Node
	if err := dec.Decode(&first); err == nil {
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return Config{}, Problems{{Line: extra.Line, Message: "more than one YAML document; the bridge reads one"}}
		}
	}
	var found Problems
	collect := func(err error) {
		var p Problems
		switch {
		case err == nil:
		case errors.As(err, &p):
			found = append(found, p...)
		default:
			found = append(found, Problemf("%s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")))
		}
	}
	collect(cfg.Validate())
	for _, c := range checks {
		collect(c(cfg))
	}
	if p := merge(decoding, found, lines); len(p) > 0 {
		return Config{}, p
	}
	return cfg, nil
}

var lineRef = regexp.MustCompile(`line (\d+): `)

// Load reads and parses a configuration file, exactly as start-up does.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// checkListen checks a listen address as net.Listen reads it, without binding it:
// host:port, the host empty, an IP address or a host name, the port a number from 0
// to 65535 or a service name.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 64); err == nil {
		if n > 65535 {
			return fmt.Errorf("%q: port %d is out of range (0 to 65535)", addr, n)
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("%q: port %q is neither a number from 0 to 65535 nor a service name", addr, port)
	}
	ip, _, _ := strings.Cut(host, "%") // an IPv6 zone
	if host != "" && net.ParseIP(ip) == nil && !hostName.MatchString(host) {
		return fmt.Errorf("%q: host %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

var hostName = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

// Validate checks every value and returns Problems (wrapping ErrInvalid) naming each
// key and value at fault, or nil.
func (c Config) Validate() error {
	var p Problems
	add := p.Addf
	for _, kv := range [][2]string{{"listen.data", c.Listen.Data}, {"listen.ops", c.Listen.Ops}} {
		if err := checkListen(kv[1]); err != nil {
			add("%s: %v", kv[0], err)
		}
	}
	if c.Listen.Data == c.Listen.Ops {
		add("listen.ops: %q is also listen.data; the two listeners need their own addresses", c.Listen.Ops)
	}
	u, err := url.Parse(c.Pulsar.URL)
	switch {
	case err != nil || u.Host == "":
		add("pulsar.url: %q is not a URL like pulsar://host:6650", c.Pulsar.URL)
	case u.Scheme != "pulsar" && u.Scheme != "pulsar+ssl":
		add("pulsar.url: scheme %q is neither pulsar nor pulsar+ssl", u.Scheme)
	}
	if _, err := c.Pulsar.Token.Resolve(); err != nil {
		add("pulsar.token: %v", err)
	}
	p = append(p, validateOAuth2(c.Pulsar)...)
	for _, kv := range [][2]string{{"pulsar.tls.caFile", c.Pulsar.TLS.CAFile}, {"pulsar.tls.certFile", c.Pulsar.TLS.CertFile}, {"pulsar.tls.keyFile", c.Pulsar.TLS.KeyFile}} {
		if kv[1] != "" {
			if _, err := os.Stat(kv[1]); err != nil {
				add("%s: %v", kv[0], err)
			}
		}
	}
	if (c.Pulsar.TLS.CertFile == "") != (c.Pulsar.TLS.KeyFile == "") {
		add("pulsar.tls: certFile and keyFile go together")
	}
	if c.Pulsar.TLS.Authenticate {
		switch {
		case c.Pulsar.TLS.CertFile == "":
			add("pulsar.tls.authenticate: needs a client certificate (pulsar.tls.certFile and keyFile)")
		case u != nil && u.Scheme != "pulsar+ssl":
			add("pulsar.tls.authenticate: needs a pulsar+ssl:// pulsar.url")
		}
		if c.Pulsar.Token != "" || c.Pulsar.OAuth2.On() {
			add("pulsar.tls.authenticate: pulsar.token or pulsar.oauth2 is set too; authenticate with one of them")
		}
	}
	positive := func(key string, v int64) {
		if v <= 0 {
			add("%s: %d must be greater than zero", key, v)
		}
	}
	positive("pulsar.operationTimeout", int64(c.Pulsar.OperationTimeout))
	positive("pulsar.keepAlive", int64(c.Pulsar.KeepAlive))
	positive("pulsar.writeTimeout", int64(c.Pulsar.WriteTimeout))
	in := c.Ingress
	positive("ingress.maxRecordBytes", int64(in.MaxRecordBytes))
	positive("ingress.maxStreams", int64(in.MaxStreams))
	positive("ingress.idleTimeout", int64(in.IdleTimeout))
	positive("ingress.publishTimeout", int64(in.PublishTimeout))
	positive("ingress.pendingRecords", int64(in.PendingRecords))
	positive("ingress.pendingBytes", int64(in.PendingBytes))
	positive("ingress.drainTimeout", int64(in.DrainTimeout))
	positive("ingress.bufferRecordBytes", int64(in.BufferRecordBytes))
	positive("pulsar.producerIdleTimeout", int64(c.Pulsar.ProducerIdleTimeout))
	positive("pulsar.maxProducers", int64(c.Pulsar.MaxProducers))
	positive("memory.budget", int64(c.Memory.Budget))
	if c.Memory.Limit < 0 {
		add("memory.limit: %d must not be negative (0 derives it from POD_MEMORY_LIMIT)", c.Memory.Limit)
	} else if c.Memory.Limit > 0 && c.Memory.Budget > c.Memory.Limit/2 {
		add("memory.budget: %d bytes is more than half of memory.limit (%d); the rest is the process's own (buffers, copies, the runtime)", c.Memory.Budget, c.Memory.Limit)
	}
	switch c.Pulsar.Compression {
	case "none", "lz4", "zlib", "zstd", "snappy":
	default:
		add("pulsar.compression: %q is not one of none, lz4, zlib, zstd, snappy", c.Pulsar.Compression)
	}
	switch c.Pulsar.HashingScheme {
	case "javaString", "murmur3":
	default:
		add("pulsar.hashingScheme: %q is not one of javaString, murmur3", c.Pulsar.HashingScheme)
	}
	switch c.Pulsar.NamedStreamAccessMode {
	case "shared", "exclusiveWithFencing":
	default:
		add("pulsar.namedStreamAccessMode: %q is not one of shared, exclusiveWithFencing", c.Pulsar.NamedStreamAccessMode)
	}
	positive("egress.maxStreams", int64(c.Egress.MaxStreams))
	positive("egress.writeTimeout", int64(c.Egress.WriteTimeout))
	if (c.Listen.TLS.CertFile == "") != (c.Listen.TLS.KeyFile == "") {
		add("listen.tls: certFile and keyFile go together")
	}
	for _, kv := range [][2]string{{"listen.tls.certFile", c.Listen.TLS.CertFile}, {"listen.tls.keyFile", c.Listen.TLS.KeyFile}} {
		if kv[1] != "" {
			if _, err := os.Stat(kv[1]); err != nil {
				add("%s: %v", kv[0], err)
			}
		}
	}
	for _, r := range removedTracingKeys(c.Tracing) {
		add("%s: removed: %s", r[0], r[1])
	}
	positive("tracing.segmentRecords", c.Tracing.SegmentRecords)
	if c.Tracing.SegmentInterval <= 0 {
		add("tracing.segmentInterval: %s must be greater than zero", c.Tracing.SegmentInterval.D())
	}
	for _, r := range RetiredEnv {
		if v := os.Getenv(r.Name); v != "" { // empty was never a setting: it was ignored
			add("environment variable %s=%q is no longer read: write %s in the configuration file instead and unset %s", r.Name, v, r.Key, r.Name)
		}
	}
	p = append(p, validateAuth(c.Auth, c.Routes, c.Streams)...)
	p = append(p, validateRoutes(c.Routes)...)
	p = append(p, validateStreams(c.Streams, c.Routes)...)
	if len(p) == 0 {
		return nil
	}
	return p
}
