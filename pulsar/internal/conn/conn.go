// Package conn is one multiplexed connection to a Pulsar broker: the CONNECT
// handshake, a reader goroutine that decodes and dispatches frames, a writer goroutine
// that coalesces queued frames into few syscalls (each write under a deadline), a
// keep-alive goroutine that pings an idle broker and closes the connection when it
// falls silent (as yamux does), and request correlation. Closing is idempotent and
// fails every waiter with one error.
package conn

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// ProtocolVersion is the protocol version we announce (the official Go client's).
const ProtocolVersion = 20

// Auth supplies authentication data for CONNECT and AUTH_RESPONSE.
type Auth interface {
	Method() string
	// Data returns the current credentials; it is called again to answer AUTH_CHALLENGE.
	Data() ([]byte, error)
}

// Options configure a connection.
type Options struct {
	Addr string      // host:port to dial
	TLS  *tls.Config // nil for plain TCP
	// TLSNameFromAddr verifies the broker's certificate against the host dialled (each
	// physical broker of a cluster, or the proxy) instead of TLS.ServerName; off when
	// a server name was configured.
	TLSNameFromAddr bool
	// TLSRoots, when set, gives the CAs each dial verifies the broker against (a bundle
	// re-read when its file changes) instead of TLS.RootCAs.
	TLSRoots         func() *x509.CertPool
	Auth             Auth   // nil for none
	ProxyToBrokerURL string // set when Addr is a proxy for this logical broker
	ClientVersion    string
	ConnectTimeout   time.Duration // default 10 s
	KeepAlive        time.Duration // default 30 s; the peer is dead after two silent intervals
	// WriteTimeout bounds every socket write (default 30 s): a broker that stops
	// reading (a frozen JVM, data stuck in a partition) closes the connection instead
	// of blocking the writer for ever.
	WriteTimeout time.Duration
	Logger       *slog.Logger
	// Dial opens the TCP connection (before TLS); net.Dialer's when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// ProducerHandler receives the frames addressed to one producer. Its methods run on the
// connection's reader goroutine and must not block.
type ProducerHandler interface {
	HandleReceipt(*pb.CommandSendReceipt)
	HandleSendError(*pb.CommandSendError)
	// HandleClose is called when the broker closes the producer (CLOSE_PRODUCER,
	// TOPIC_MIGRATED) or the connection ends.
	HandleClose(reason error)
}

// ConsumerHandler receives the frames addressed to one consumer; methods must not block.
type ConsumerHandler interface {
	HandleMessage(cmd *pb.CommandMessage, f *frame.Frame, frameErr error)
	HandleEndOfTopic()
	HandleActiveChange(active bool)
	HandleClose(reason error)
}

// TopicWatcherHandler receives the changes a topic-list watcher (WATCH_TOPIC_LIST) is
// told of; methods run on the connection's reader and must not block.
type TopicWatcherHandler interface {
	HandleTopicUpdate(*pb.CommandWatchTopicUpdate)
	// HandleClose is called when the connection ends.
	HandleClose(reason error)
}

// Conn is one connection to one broker.
type Conn struct {
	opts           Options
	nc             net.Conn
	log            *slog.Logger
	serverVersion  string
	protocol       int32
	maxMessageSize int
	topicWatchers  bool // the broker's CONNECTED said supports_topic_watchers

	mu sync.Mutex
	// Frames waiting for the writer, in order: large frames by reference (queue), small
	// ones coalesced into tail, so many small writes become one syscall and a large
	// frame is never copied again.
	queue      [][]byte
	tail       []byte
	spareQueue [][]byte // writer-owned buffers, reused between writes
	spareTail  []byte
	spareWrite [][]byte // writeAll's scratch
	requests   map[uint64]chan *pb.BaseCommand
	producers  map[uint64]ProducerHandler
	consumers  map[uint64]ConsumerHandler
	watchers   map[uint64]TopicWatcherHandler
	closed     bool

	kick         chan struct{}
	done         chan struct{}
	closeErr     error
	lastReceived atomic.Int64 // unix nanos
	lastSent     atomic.Int64 // unix nanos: when the writer last finished a write
	pingInTail   bool         // a keep-alive PING is queued and not yet taken by the writer; guarded by mu
	live         liveness
	wg           sync.WaitGroup
}

// Dial connects, performs the handshake and starts the connection's goroutines.
func Dial(ctx context.Context, opts Options) (*Conn, error) {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 30 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ClientVersion == "" {
		opts.ClientVersion = "recordio-bridge"
	}
	ctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	dial := opts.Dial
	if dial == nil {
		d := net.Dialer{KeepAlive: opts.KeepAlive}
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("pulsar: dialing %s: %w", opts.Addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if opts.TLS != nil {
		cfg := opts.TLS
		if host, _, err := net.SplitHostPort(opts.Addr); err == nil && opts.TLSNameFromAddr && host != cfg.ServerName {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		if opts.TLSRoots != nil {
			if cfg == opts.TLS {
				cfg = cfg.Clone()
			}
			cfg.RootCAs = opts.TLSRoots()
		}
		tlsConn := tls.Client(nc, cfg)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("pulsar: TLS handshake with %s: %w", opts.Addr, err)
		}
		nc = tlsConn
	}
	c := &Conn{
		opts:           opts,
		nc:             nc,
		log:            opts.Logger.With("broker", opts.Addr),
		maxMessageSize: frame.DefaultMaxMessageSize,
		requests:       map[uint64]chan *pb.BaseCommand{},
		producers:      map[uint64]ProducerHandler{},
		consumers:      map[uint64]ConsumerHandler{},
		watchers:       map[uint64]TopicWatcherHandler{},
		kick:           make(chan struct{}, 1),
		done:           make(chan struct{}),
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	if err := c.handshake(ctx, br); err != nil {
		nc.Close()
		return nil, err
	}
	now := time.Now()
	c.lastReceived.Store(now.UnixNano())
	c.lastSent.Store(now.UnixNano())
	c.live.progress = now
	c.wg.Add(3)
	go c.readLoop(br)
	go c.writeLoop()
	go c.keepAlive()
	return c, nil
}

// Addr is the address this connection dialed.
func (c *Conn) Addr() string { return c.opts.Addr }

// MaxMessageSize is the broker's message size limit from CONNECTED.
func (c *Conn) MaxMessageSize() int { return c.maxMessageSize }

// SupportsTopicWatchers reports whether the broker accepts WATCH_TOPIC_LIST (its
// enableBrokerSideSubscriptionPatternEvaluation, announced in CONNECTED).
func (c *Conn) SupportsTopicWatchers() bool { return c.topicWatchers }

// ServerVersion is the broker's version string.
func (c *Conn) ServerVersion() string { return c.serverVersion }

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is open.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.closeErr
	default:
		return nil
	}
}

// Close ends the connection with ErrClosed and waits for its goroutines.
func (c *Conn) Close() error {
	c.closeWith(errors.New("closed by the client"))
	c.wg.Wait()
	return nil
}

func (c *Conn) closeWith(cause error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = &closedError{addr: c.opts.Addr, cause: cause}
	producers, consumers, watchers := c.producers, c.consumers, c.watchers
	c.producers, c.consumers = map[uint64]ProducerHandler{}, map[uint64]ConsumerHandler{}
	c.watchers = map[uint64]TopicWatcherHandler{}
	c.requests = map[uint64]chan *pb.BaseCommand{}
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	c.log.Debug("connection closed", "cause", cause)
	for _, p := range producers {
		p.HandleClose(c.closeErr)
	}
	for _, h := range consumers {
		h.HandleClose(c.closeErr)
	}
	for _, h := range watchers {
		h.HandleClose(c.closeErr)
	}
}

// Abort ends the connection with cause without waiting for its goroutines; safe to
// call from anywhere, including a handler.
func (c *Conn) Abort(cause error) { go c.closeWith(cause) }

// AddProducer routes frames for producer id to h until RemoveProducer. It fails when
// the connection is already closed.
func (c *Conn) AddProducer(id uint64, h ProducerHandler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.producers[id] = h
	return nil
}

// RemoveProducer stops routing frames to producer id.
func (c *Conn) RemoveProducer(id uint64) {
	c.mu.Lock()
	delete(c.producers, id)
	c.mu.Unlock()
}

// AddConsumer routes frames for consumer id to h until RemoveConsumer.
func (c *Conn) AddConsumer(id uint64, h ConsumerHandler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.consumers[id] = h
	return nil
}

// RemoveConsumer stops routing frames to consumer id.
func (c *Conn) RemoveConsumer(id uint64) {
	c.mu.Lock()
	delete(c.consumers, id)
	c.mu.Unlock()
}

// AddTopicWatcher routes WATCH_TOPIC_UPDATE frames for watcher id to h until
// RemoveTopicWatcher. It fails when the connection is already closed.
func (c *Conn) AddTopicWatcher(id uint64, h TopicWatcherHandler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.watchers[id] = h
	return nil
}

// RemoveTopicWatcher stops routing frames to watcher id.
func (c *Conn) RemoveTopicWatcher(id uint64) {
	c.mu.Lock()
	delete(c.watchers, id)
	c.mu.Unlock()
}

// Request sends cmd (whose request id is reqID) and waits for the broker's answer:
// SUCCESS, PRODUCER_SUCCESS, LOOKUP_RESPONSE, ... An ERROR answer becomes a *ServerError.
func (c *Conn) Request(ctx context.Context, reqID uint64, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	ch := make(chan *pb.BaseCommand, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, c.closeErr
	}
	c.requests[reqID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.requests, reqID)
		c.mu.Unlock()
	}()
	if err := c.Send(cmd); err != nil {
		return nil, err
	}
	for {
		select {
		case resp := <-ch:
			if e := resp.GetError(); resp.GetType() == pb.BaseCommand_ERROR && e != nil {
				return nil, &ServerError{Code: ServerErrorCode(e.GetError()), Message: e.GetMessage()}
			}
			if ps := resp.GetProducerSuccess(); ps != nil && !ps.GetProducerReady() {
				// The producer waits for exclusive access; another PRODUCER_SUCCESS follows.
				continue
			}
			return resp, nil
		case <-c.done:
			return nil, c.closeErr
		case <-ctx.Done():
			return nil, fmt.Errorf("pulsar: waiting for the broker's answer to %s: %w", cmd.GetType(), ctx.Err())
		}
	}
}
