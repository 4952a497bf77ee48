package pulsar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/internal/certfile"
	"github.com/recordio-bridge/bridge/pulsar/internal/conn"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// URL of the cluster: pulsar://host:port or pulsar+ssl://host:port.
	URL string
	// TLS settings for pulsar+ssl:// (hostname verification is always on unless
	// TLSAllowInsecure). The files are read again when they change (checked at most once
	// a second, when a connection is opened): a renewed client certificate is presented,
	// and a changed CA bundle trusted, from the next connection on; open connections keep
	// theirs. Changed files that do not make a usable certificate and key (half-written,
	// mismatched) or bundle are refused and the last good ones stay in use.
	TLSCAFile        string // PEM bundle of trusted CAs; the system pool when empty
	TLSCertFile      string // client certificate (PEM), optional
	TLSKeyFile       string // its key (PEM)
	TLSAllowInsecure bool   // skip certificate verification (tests only)
	TLSServerName    string // the name verified in every broker's certificate; empty: the host dialled
	// TLSFileRefused, when set, is called once for each changed content of the TLS files
	// that was refused (wrapping certfile's reason; logged too), to count it.
	TLSFileRefused func(error)
	// Token authentication: a token, or a file holding one (re-read to answer AUTH_CHALLENGE).
	Token     string
	TokenFile string
	// Auth, when set, supplies the credentials instead of Token or TokenFile (an OAuth2
	// token source from pulsar/oauth2, TLSAuthentication).
	Auth Authentication
	// OperationTimeout bounds lookups and producer/consumer registration (default 30 s).
	OperationTimeout time.Duration
	// ConnectTimeout bounds dialling and the handshake (default 10 s).
	ConnectTimeout time.Duration
	// KeepAlive is the ping interval; a broker silent for two intervals is dead (default 30 s).
	KeepAlive time.Duration
	// WriteTimeout bounds every write to a broker; one that stops reading (frozen,
	// black-holed) has its connection closed and everything on it retried (default 30 s).
	WriteTimeout time.Duration
	Logger       *slog.Logger
	// Dialer, when set, opens every TCP connection to a broker (before TLS), instead of
	// a net.Dialer: to go through a SOCKS proxy or a custom network, or for tests that
	// cut connections.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client holds the connections to a Pulsar cluster.
type Client struct {
	opts        ClientOptions
	serviceURL  *url.URL
	serviceAddr string
	tls         bool
	pool        *conn.Pool
	log         *slog.Logger

	requestID  atomic.Uint64
	producerID atomic.Uint64
	consumerID atomic.Uint64
	watcherID  atomic.Uint64

	// closing is closed when Close begins: creations waiting out a refusal's backoff
	// stop then.
	closing chan struct{}

	mu        sync.Mutex
	closed    bool
	producers map[*Producer]struct{}
	consumers map[*Consumer]struct{}
}

// NewClient validates the options and returns a client; it connects lazily.
func NewClient(opts ClientOptions) (*Client, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q: want pulsar://host:port or pulsar+ssl://host:port", ErrInvalidOptions, opts.URL)
	}
	var useTLS bool
	switch u.Scheme {
	case "pulsar":
	case "pulsar+ssl":
		useTLS = true
	default:
		return nil, fmt.Errorf("%w: URL %q: scheme %q is not pulsar:// or pulsar+ssl://", ErrInvalidOptions, opts.URL, u.Scheme)
	}
	if opts.OperationTimeout <= 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Client{opts: opts, serviceURL: u, serviceAddr: hostPort(u), tls: useTLS, log: opts.Logger, producers: map[*Producer]struct{}{}, consumers: map[*Consumer]struct{}{},
		closing: make(chan struct{})}
	base := conn.Options{
		ClientVersion:  "recordio-bridge",
		ConnectTimeout: opts.ConnectTimeout,
		KeepAlive:      opts.KeepAlive,
		WriteTimeout:   opts.WriteTimeout,
		Logger:         opts.Logger,
		Dial:           opts.Dialer,
	}
	if useTLS {
		cfg, roots, err := tlsConfig(opts, u.Hostname())
		if err != nil {
			return nil, err
		}
		base.TLS, base.TLSRoots = cfg, roots
		// Each broker of a cluster has its own certificate: verify the host dialled
		// (the lookup's broker, or the service URL's when proxied), unless configured.
		base.TLSNameFromAddr = opts.TLSServerName == ""
	}
	if opts.Token != "" && opts.TokenFile != "" {
		return nil, fmt.Errorf("%w: set Token or TokenFile, not both", ErrInvalidOptions)
	}
	if opts.Auth != nil && (opts.Token != "" || opts.TokenFile != "") {
		return nil, fmt.Errorf("%w: set Auth or a token, not both", ErrInvalidOptions)
	}
	if _, ok := opts.Auth.(tlsAuth); ok && (!useTLS || opts.TLSCertFile == "") {
		return nil, fmt.Errorf("%w: TLS authentication needs a pulsar+ssl:// URL and a client certificate (TLSCertFile, TLSKeyFile)", ErrInvalidOptions)
	}
	if opts.Auth != nil {
		base.Auth = opts.Auth
	} else if opts.Token != "" || opts.TokenFile != "" {
		base.Auth = tokenAuth{token: opts.Token, file: opts.TokenFile}
		if _, err := base.Auth.Data(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
		}
	}
	c.pool = conn.NewPool(base)
	return c, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "pulsar+ssl" {
		return net.JoinHostPort(u.Hostname(), "6651")
	}
	return net.JoinHostPort(u.Hostname(), "6650")
}

// tlsFilesEvery is how often the TLS files are checked for a change, on dial.
var tlsFilesEvery = time.Second

// tlsConfig is the configuration every TLS dial starts from; roots, when not nil, gives
// the CA bundle as of each dial.
func tlsConfig(opts ClientOptions, host string) (*tls.Config, func() *x509.CertPool, error) {
	cfg := &tls.Config{ServerName: host, InsecureSkipVerify: opts.TLSAllowInsecure, MinVersion: tls.VersionTLS12}
	if opts.TLSServerName != "" {
		cfg.ServerName = opts.TLSServerName
	}
	fo := certfile.Options{Every: tlsFilesEvery, Logger: opts.Logger.With("component", "tls"), Refused: opts.TLSFileRefused}
	var roots func() *x509.CertPool
	if opts.TLSCAFile != "" {
		r, err := certfile.NewRoots(opts.TLSCAFile, fo)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: TLS CA file: %v", ErrInvalidOptions, err)
		}
		roots = r.Pool
	}
	if opts.TLSCertFile != "" || opts.TLSKeyFile != "" {
		pair, err := certfile.NewPair(opts.TLSCertFile, opts.TLSKeyFile, fo)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: TLS client certificate: %v", ErrInvalidOptions, err)
		}
		cfg.GetClientCertificate = pair.GetClientCertificate
	}
	return cfg, roots, nil
}

// Authentication supplies the credentials sent on CONNECT and in answer to every
// AUTH_CHALLENGE.
type Authentication interface {
	// Method is the auth method name ("token", "tls").
	Method() string
	// Data returns the current credentials; it is called for every CONNECT and
	// AUTH_CHALLENGE, so it must be cheap. An error fails that handshake (the connection
	// is retried with backoff).
	Data() ([]byte, error)
}

// TLSAuthentication makes the client certificate (ClientOptions.TLSCertFile and
// TLSKeyFile) the client's identity, as the Java client's AuthenticationTls: CONNECT
// names the auth method "tls" with no data, and the broker's TLS provider takes the
// role from the certificate presented in the TLS handshake.
func TLSAuthentication() Authentication { return tlsAuth{} }

type tlsAuth struct{}

func (tlsAuth) Method() string        { return "tls" }
func (tlsAuth) Data() ([]byte, error) { return []byte{}, nil }

type tokenAuth struct{ token, file string }

func (tokenAuth) Method() string { return "token" }

func (a tokenAuth) Data() ([]byte, error) {
	if a.file == "" {
		return []byte(a.token), nil
	}
	b, err := os.ReadFile(a.file)
	if err != nil {
		return nil, fmt.Errorf("reading the token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return nil, fmt.Errorf("the token file %s is empty", a.file)
	}
	return []byte(t), nil
}

// Close closes every producer and connection of the client.
func (c *Client) Close() error { return c.CloseContext(context.Background()) }

// CloseContext is Close bounded by ctx: when ctx ends (at once if it has ended), the
// producers' flushes and the closes' waits for the broker's answers are cut, what is
// pending fails with ErrProducerClosed, and the connections close.
func (c *Client) CloseContext(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	producers, consumers := c.producers, c.consumers
	c.producers, c.consumers = nil, nil
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		for p := range producers {
			p.cutNow()
		}
		for cons := range consumers {
			cons.cutNow()
		}
	})
	defer stop()
	for p := range producers {
		p.Close()
	}
	for cons := range consumers {
		cons.Close()
	}
	c.pool.Close()
	return nil
}

// Ping checks that the service URL's broker is reachable: it returns nil once a
// connection to it has completed the handshake (reusing the pooled one when it is open).
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.serviceConn(ctx)
	return err
}

// HandshakeRefusal is a broker's refusal of the client's CONNECT (errors.Is
// ErrHandshake) not yet followed by an accepted handshake at the same address: an
// AuthenticationError (temporary: producers and consumers reconnect with backoff, new
// ones are retried within their deadline), an unsupported protocol version, or a port
// that does not speak Pulsar.
type HandshakeRefusal = conn.Refusal

// HandshakeRefusals returns the brokers refusing the client's handshakes now (refused
// within the last two minutes and not accepted since), by address.
func (c *Client) HandshakeRefusals() []HandshakeRefusal { return c.pool.Refusals() }

func (c *Client) nextRequestID() uint64 { return c.requestID.Add(1) }

// serviceConn returns the connection to the service URL's broker.
func (c *Client) serviceConn(ctx context.Context) (*conn.Conn, error) {
	return c.pool.Get(ctx, c.serviceURL.String(), c.serviceAddr, false)
}

// brokerConn is where a topic lives: the logical broker URL and the address to dial.
type brokerConn struct {
	logical, physical string
	proxied           bool
}

// lookup finds the broker that owns topic, following redirects.
func (c *Client) lookup(ctx context.Context, topic string) (brokerConn, error) {
	target := brokerConn{logical: c.serviceURL.String(), physical: c.serviceAddr}
	authoritative := false
	for range 20 {
		cn, err := c.pool.Get(ctx, target.logical, target.physical, target.proxied)
		if err != nil {
			return brokerConn{}, fmt.Errorf("%w: %s: %w", ErrLookup, topic, err)
		}
		id := c.nextRequestID()
		resp, err := cn.Request(ctx, id, &pb.BaseCommand{
			Type:        pb.BaseCommand_LOOKUP.Enum(),
			LookupTopic: &pb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(id), Authoritative: proto.Bool(authoritative)},
		})
		if err != nil {
			return brokerConn{}, fmt.Errorf("%w: %s: %w", ErrLookup, topic, err)
		}
		lr := resp.GetLookupTopicResponse()
		if lr == nil {
			return brokerConn{}, fmt.Errorf("%w: %s: unexpected answer %s", ErrLookup, topic, resp.GetType())
		}
		brokerURL := lr.GetBrokerServiceUrl()
		if c.tls {
			brokerURL = lr.GetBrokerServiceUrlTls()
		}
		switch lr.GetResponse() {
		case pb.CommandLookupTopicResponse_Failed:
			return brokerConn{}, fmt.Errorf("%w: %s: %w", ErrLookup, topic, &ServerError{Code: ServerErrorCode(lr.GetError()), Message: lr.GetMessage()})
		case pb.CommandLookupTopicResponse_Redirect, pb.CommandLookupTopicResponse_Connect:
			if brokerURL == "" {
				return brokerConn{}, fmt.Errorf("%w: %s: the broker answered without a broker URL", ErrLookup, topic)
			}
			u, err := url.Parse(brokerURL)
			if err != nil || u.Host == "" {
				return brokerConn{}, fmt.Errorf("%w: %s: bad broker URL %q", ErrLookup, topic, brokerURL)
			}
			next := brokerConn{logical: brokerURL, physical: hostPort(u)}
			if lr.GetProxyThroughServiceUrl() {
				next.physical, next.proxied = c.serviceAddr, true
			}
			if lr.GetResponse() == pb.CommandLookupTopicResponse_Connect {
				return next, nil
			}
			target, authoritative = next, lr.GetAuthoritative()
		}
	}
	return brokerConn{}, fmt.Errorf("%w: %s: more than 20 redirects", ErrLookup, topic)
}

// partitions returns the number of partitions of topic (0 for a non-partitioned topic),
// asking again after a transient refusal, with backoff b, while ctx leaves time.
// Partitions is topic's partition count as the broker has it now: 0 for a
// non-partitioned topic.
func (c *Client) Partitions(ctx context.Context, topic string) (int, error) {
	t, err := TopicName(topic)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.OperationTimeout)
	defer cancel()
	return c.partitions(ctx, t, Backoff{}.withDefaults())
}

func (c *Client) partitions(ctx context.Context, topic string, b Backoff) (int, error) {
	var n int
	err := creationRetry(ctx, c.closing, b, func() error {
		var err error
		n, err = c.partitionsOnce(ctx, topic)
		return err
	})
	return n, err
}

func (c *Client) partitionsOnce(ctx context.Context, topic string) (int, error) {
	cn, err := c.serviceConn(ctx)
	if err != nil {
		return 0, err
	}
	id := c.nextRequestID()
	resp, err := cn.Request(ctx, id, &pb.BaseCommand{
		Type:              pb.BaseCommand_PARTITIONED_METADATA.Enum(),
		PartitionMetadata: &pb.CommandPartitionedTopicMetadata{Topic: proto.String(topic), RequestId: proto.Uint64(id)},
	})
	if err != nil {
		return 0, fmt.Errorf("%w: partitioned metadata of %s: %w", ErrLookup, topic, err)
	}
	r := resp.GetPartitionMetadataResponse()
	if r == nil || r.GetResponse() == pb.CommandPartitionedTopicMetadataResponse_Failed {
		return 0, fmt.Errorf("%w: partitioned metadata of %s: %w", ErrLookup, topic, &ServerError{Code: ServerErrorCode(r.GetError()), Message: r.GetMessage()})
	}
	return int(r.GetPartitions()), nil
}

// TopicName returns the fully qualified form of a topic name: "t" is
// persistent://public/default/t, "tenant/ns/t" is persistent://tenant/ns/t.
func TopicName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	if i := strings.Index(name, "://"); i >= 0 {
		scheme := name[:i]
		if scheme != "persistent" && scheme != "non-persistent" {
			return "", fmt.Errorf("%w: %q: domain %q is not persistent or non-persistent", ErrInvalidTopic, name, scheme)
		}
		if strings.Count(name[i+3:], "/") != 2 || strings.Contains(name[i+3:], "//") || strings.HasSuffix(name, "/") {
			return "", fmt.Errorf("%w: %q: want %s://tenant/namespace/topic", ErrInvalidTopic, name, scheme)
		}
		return name, nil
	}
	switch strings.Count(name, "/") {
	case 0:
		return "persistent://public/default/" + name, nil
	case 2:
		if strings.Contains(name, "//") || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
			break
		}
		return "persistent://" + name, nil
	}
	return "", fmt.Errorf("%w: %q: want topic, tenant/namespace/topic or persistent://tenant/namespace/topic", ErrInvalidTopic, name)
}

// PartitionTopic is the name of partition i of topic (fully qualified, as TopicName
// gives it): a producer or consumer of that name works on the one partition.
func PartitionTopic(topic string, i int) string { return partitionName(topic, i) }

func partitionName(topic string, i int) string { return fmt.Sprintf("%s-partition-%d", topic, i) }
