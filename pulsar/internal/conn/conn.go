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
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

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

// liveness is what the writer tells the keep-alive about its progress: the broker may
// answer a PING only once it has read it, and a PING queued behind a large write (a
// resend after a reconnect) reaches a slow broker late.
type liveness struct {
	mu          sync.Mutex
	progress    time.Time // the last write that completed (a chunk of at most writeChunk)
	written     int64     // bytes written in all
	pingWritten time.Time // the last PING handed to the socket...
	pingEnd     int64     // ...and written by then
	pingRead    time.Time // when pingReadBound bytes had followed it: the broker has read it
	// pingPaced is the last write that completed after the PING while the writer had a
	// backlog all along since it: such writes are paced by the socket, so they show the
	// broker reading. Once the writer found nothing queued (idleSincePing), what it wrote
	// sits in buffers with room to spare, and a later write completes at once whether
	// the broker reads or not (a frozen one's kernel, or ours on a black-holed network,
	// takes a trickle of small writes for a long time): it no longer counts.
	pingPaced     time.Time
	idleSincePing bool
}

// pingReadBound is how much written after a PING proves the broker has read it: more
// than the socket buffers between the two ends can hold (Linux's defaults let them grow
// to 4 MiB for sending and 6 MiB for receiving).
const pingReadBound = 32 << 20

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

func (c *Conn) handshake(ctx context.Context, br *bufio.Reader) error {
	connect := &pb.CommandConnect{
		ClientVersion:   proto.String(c.opts.ClientVersion),
		ProtocolVersion: proto.Int32(ProtocolVersion),
		FeatureFlags:    &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true), SupportsTopicWatchers: proto.Bool(true)},
	}
	if c.opts.ProxyToBrokerURL != "" {
		connect.ProxyToBrokerUrl = proto.String(c.opts.ProxyToBrokerURL)
	}
	if c.opts.Auth != nil {
		data, err := c.opts.Auth.Data()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCredentials, err)
		}
		connect.AuthMethodName = proto.String(c.opts.Auth.Method())
		connect.AuthData = data
	}
	buf, err := frame.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: connect})
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(dl)
		defer c.nc.SetDeadline(time.Time{})
	}
	if _, err := c.nc.Write(buf); err != nil {
		return handshakeErr("sending CONNECT to", c.opts.Addr, err)
	}
	for {
		var f frame.Frame
		if err := readFrame(br, &f, frame.DefaultMaxMessageSize+frame.Padding); err != nil {
			return handshakeErr("waiting for CONNECTED from", c.opts.Addr, err)
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_CONNECTED:
			cd := f.Cmd.GetConnected()
			c.serverVersion = cd.GetServerVersion()
			c.protocol = cd.GetProtocolVersion()
			if n := cd.GetMaxMessageSize(); n > 0 {
				c.maxMessageSize = int(n)
			}
			c.topicWatchers = cd.GetFeatureFlags().GetSupportsTopicWatchers()
			return nil
		case pb.BaseCommand_ERROR:
			e := f.Cmd.GetError()
			return fmt.Errorf("%w: %w", ErrHandshake, &ServerError{Code: ServerErrorCode(e.GetError()), Message: e.GetMessage()})
		case pb.BaseCommand_AUTH_CHALLENGE:
			resp, _, err := c.authResponse()
			if err != nil {
				if errors.Is(err, ErrCredentials) {
					return err
				}
				return fmt.Errorf("%w: %v", ErrHandshake, err)
			}
			if _, err := c.nc.Write(resp); err != nil {
				return handshakeErr("answering AUTH_CHALLENGE of", c.opts.Addr, err)
			}
		default:
			return fmt.Errorf("%w: %s answered CONNECT with %s", ErrHandshake, c.opts.Addr, f.Cmd.GetType())
		}
	}
}

// Fingerprint names credentials in logs without showing them: "sha256:" and the first
// 12 hex digits of their SHA-256 (empty credentials: "none").
func Fingerprint(data []byte) string {
	if len(data) == 0 {
		return "none"
	}
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:6])
}

// authResponse is the AUTH_RESPONSE frame answering a challenge, and the credentials it holds.
func (c *Conn) authResponse() ([]byte, []byte, error) {
	if c.opts.Auth == nil {
		return nil, nil, errors.New("the broker sent AUTH_CHALLENGE but no authentication is configured")
	}
	data, err := c.opts.Auth.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: answering AUTH_CHALLENGE: %w", ErrCredentials, err)
	}
	resp, err := frame.AppendCommand(nil, &pb.BaseCommand{
		Type: pb.BaseCommand_AUTH_RESPONSE.Enum(),
		AuthResponse: &pb.CommandAuthResponse{
			ClientVersion:   proto.String(c.opts.ClientVersion),
			ProtocolVersion: proto.Int32(ProtocolVersion),
			Response:        &pb.AuthData{AuthMethodName: proto.String(c.opts.Auth.Method()), AuthData: data},
		},
	})
	return resp, data, err
}

// handshakeErr is the error of a handshake whose read or write failed. What the peer
// sent that is not a Pulsar frame (a web or TLS port, garbage) is ErrHandshake, as is a
// refusal: it will not change by itself. A transport failure — the broker closed or
// reset the connection, or sent nothing before the deadline (frozen, restarting, a
// proxy cutting in) — is the connection's loss (ErrClosed), temporary like any other.
func handshakeErr(what, addr string, err error) error {
	if errors.Is(err, frame.ErrCorrupt) || errors.Is(err, frame.ErrTooLarge) {
		return fmt.Errorf("%w: %s %s: %v", ErrHandshake, what, addr, err)
	}
	return fmt.Errorf("%w: %s %s during the handshake: %w", ErrClosed, what, addr, err)
}

func readFrame(br *bufio.Reader, f *frame.Frame, maxFrame int) error {
	var prefix [4]byte
	if _, err := io.ReadFull(br, prefix[:]); err != nil {
		return err
	}
	n, err := frame.ReadSize(prefix, maxFrame)
	if err != nil {
		return err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return frame.Decode(body, f)
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

// SendFrame queues an already encoded frame (a SEND kept for resending).
func (c *Conn) SendFrame(raw []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	if len(raw) >= largeFrame {
		if len(c.tail) > 0 {
			c.queue = append(c.queue, c.tail)
			c.tail = nil
		}
		c.queue = append(c.queue, raw) // by reference: the caller keeps raw unchanged
	} else {
		c.tail = append(c.tail, raw...)
	}
	c.kickWriter()
	return nil
}

// largeFrame is the size from which SendFrame queues a frame by reference.
const largeFrame = 16 << 10

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

// Send queues a simple command frame.
func (c *Conn) Send(cmd *pb.BaseCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	var err error
	c.tail, err = frame.AppendCommand(c.tail, cmd)
	c.kickWriter()
	return err
}

// SendPayload queues a payload frame (SEND). metadata is the marshaled MessageMetadata.
func (c *Conn) SendPayload(cmd *pb.BaseCommand, metadata, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	var err error
	before := len(c.tail)
	c.tail, err = frame.AppendPayloadCommand(c.tail, cmd, metadata, payload, c.maxMessageSize+frame.Padding)
	if err != nil {
		c.tail = c.tail[:before]
		return err
	}
	c.kickWriter()
	return nil
}

func (c *Conn) kickWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
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

func (c *Conn) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	maxFrame := c.maxMessageSize + frame.Padding
	for {
		var f frame.Frame
		err := readFrame(br, &f, maxFrame)
		if err != nil && !errors.Is(err, frame.ErrChecksum) {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("the broker closed the connection: %w", err)
			}
			c.closeWith(err)
			return
		}
		c.lastReceived.Store(time.Now().UnixNano())
		c.dispatch(&f, err)
	}
}

func (c *Conn) dispatch(f *frame.Frame, frameErr error) {
	cmd := f.Cmd
	switch cmd.GetType() {
	case pb.BaseCommand_PING:
		_ = c.Send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	case pb.BaseCommand_PONG:
	case pb.BaseCommand_SEND_RECEIPT:
		if h := c.producer(cmd.GetSendReceipt().GetProducerId()); h != nil {
			h.HandleReceipt(cmd.GetSendReceipt())
		}
	case pb.BaseCommand_SEND_ERROR:
		if h := c.producer(cmd.GetSendError().GetProducerId()); h != nil {
			h.HandleSendError(cmd.GetSendError())
		}
	case pb.BaseCommand_CLOSE_PRODUCER:
		id := cmd.GetCloseProducer().GetProducerId()
		if h := c.takeProducer(id); h != nil {
			h.HandleClose(fmt.Errorf("%w: the broker closed producer %d (topic unloaded or moved)", ErrClosed, id))
		}
	case pb.BaseCommand_MESSAGE:
		if h := c.consumer(cmd.GetMessage().GetConsumerId()); h != nil {
			h.HandleMessage(cmd.GetMessage(), f, frameErr)
		}
	case pb.BaseCommand_CLOSE_CONSUMER:
		id := cmd.GetCloseConsumer().GetConsumerId()
		if h := c.takeConsumer(id); h != nil {
			h.HandleClose(fmt.Errorf("%w: the broker closed consumer %d (topic unloaded or moved)", ErrClosed, id))
		}
	case pb.BaseCommand_REACHED_END_OF_TOPIC:
		if h := c.consumer(cmd.GetReachedEndOfTopic().GetConsumerId()); h != nil {
			h.HandleEndOfTopic()
		}
	case pb.BaseCommand_ACTIVE_CONSUMER_CHANGE:
		if h := c.consumer(cmd.GetActiveConsumerChange().GetConsumerId()); h != nil {
			h.HandleActiveChange(cmd.GetActiveConsumerChange().GetIsActive())
		}
	case pb.BaseCommand_TOPIC_MIGRATED:
		m := cmd.GetTopicMigrated()
		reason := fmt.Errorf("%w: the topic migrated to %s", ErrClosed, m.GetBrokerServiceUrl())
		if m.GetResourceType() == pb.CommandTopicMigrated_Producer {
			if h := c.takeProducer(m.GetResourceId()); h != nil {
				h.HandleClose(reason)
			}
		} else if h := c.takeConsumer(m.GetResourceId()); h != nil {
			h.HandleClose(reason)
		}
	case pb.BaseCommand_WATCH_TOPIC_UPDATE:
		u := cmd.GetWatchTopicUpdate()
		c.mu.Lock()
		h := c.watchers[u.GetWatcherId()]
		c.mu.Unlock()
		if h != nil {
			h.HandleTopicUpdate(u)
		}
	case pb.BaseCommand_AUTH_CHALLENGE:
		resp, data, err := c.authResponse()
		if err != nil {
			c.closeWith(err)
			return
		}
		c.mu.Lock()
		if !c.closed {
			c.tail = append(c.tail, resp...)
			c.kickWriter()
		}
		c.mu.Unlock()
		c.log.Debug("answered AUTH_CHALLENGE with fresh credentials", "method", c.opts.Auth.Method(), "credentials", Fingerprint(data))
	default:
		id, ok := requestID(cmd)
		if !ok {
			c.log.Debug("ignoring unexpected command", "type", cmd.GetType().String())
			return
		}
		c.mu.Lock()
		ch := c.requests[id]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- cmd:
			default:
			}
		}
	}
}

func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	switch cmd.GetType() {
	case pb.BaseCommand_SUCCESS:
		return cmd.GetSuccess().GetRequestId(), true
	case pb.BaseCommand_ERROR:
		return cmd.GetError().GetRequestId(), true
	case pb.BaseCommand_PRODUCER_SUCCESS:
		return cmd.GetProducerSuccess().GetRequestId(), true
	case pb.BaseCommand_LOOKUP_RESPONSE:
		return cmd.GetLookupTopicResponse().GetRequestId(), true
	case pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
		return cmd.GetPartitionMetadataResponse().GetRequestId(), true
	case pb.BaseCommand_ACK_RESPONSE:
		return cmd.GetAckResponse().GetRequestId(), true
	case pb.BaseCommand_GET_SCHEMA_RESPONSE:
		return cmd.GetGetSchemaResponse().GetRequestId(), true
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		return cmd.GetGetTopicsOfNamespaceResponse().GetRequestId(), true
	case pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:
		return cmd.GetWatchTopicListSuccess().GetRequestId(), true
	}
	return 0, false
}

func (c *Conn) producer(id uint64) ProducerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.producers[id]
}

func (c *Conn) takeProducer(id uint64) ProducerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.producers[id]
	delete(c.producers, id)
	return h
}

func (c *Conn) consumer(id uint64) ConsumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

func (c *Conn) takeConsumer(id uint64) ConsumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.consumers[id]
	delete(c.consumers, id)
	return h
}

// keepAlive watches the connection from its own goroutine, so a writer blocked on a
// peer that stopped reading cannot blind it: it pings when nothing was sent or received
// for an interval and closes the connection when nothing arrived for two intervals and
// the PING went unanswered for one from when the broker could have read it (see
// pingAnswerDue).
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	interval := c.opts.KeepAlive
	ticker := time.NewTicker(max(interval/4, time.Millisecond))
	defer ticker.Stop()
	pinged := time.Time{} // when the last PING was queued
	for {
		select {
		case <-c.done:
			return
		case <-ticker.C:
			now := time.Now()
			last := time.Unix(0, c.lastReceived.Load())
			silent := now.Sub(last)
			asked := pinged.After(last) // a PING is out, and nothing arrived since
			// Dead only once a ping went unanswered for an interval: a late tick must
			// not condemn a peer that was never asked, nor one still reading what was
			// queued before the PING.
			if asked && silent > 2*interval && now.Sub(c.pingAnswerDue(pinged)) >= interval {
				c.closeWith(fmt.Errorf("%w: nothing for %s (%s)", ErrKeepAliveTimeout, silent.Round(time.Millisecond), c.pingState(pinged, now)))
				return
			}
			idle := now.Sub(time.Unix(0, c.lastSent.Load()))
			if !asked && (silent >= interval || idle >= interval) && now.Sub(pinged) >= interval {
				// Queued, never written from here: this goroutine must not block.
				c.queuePing()
				pinged = now
			}
		}
	}
}

// queuePing queues a PING and marks it, so the writer notes when it hands it over.
func (c *Conn) queuePing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.tail, _ = frame.AppendCommand(c.tail, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	c.pingInTail = true
	c.kickWriter()
}

// pingAnswerDue is when the broker could have read the PING queued at pinged, at the
// latest known: the interval for its answer runs from there. While the PING still waits
// behind other writes, every write that completes shows the broker reading (a frozen or
// black-holed one takes nothing once the buffers are full, and a write stalls): the
// answer is due an interval after the last one. Once written, the PING may still sit in
// the socket buffers behind what was written before it; writes that complete count
// only while the writer had a backlog all along since the PING (paced by the socket):
// once it went idle, a write completes at once into free buffer space whether or not
// the broker reads, so a trickle of them must not excuse a frozen or black-holed broker
// (see liveness.pingPaced). Once pingReadBound bytes followed it, the broker has read
// it, and no later write excuses its silence.
func (c *Conn) pingAnswerDue(pinged time.Time) time.Time {
	l := &c.live
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.pingWritten.Before(pinged): // still queued
		return later(pinged, l.progress)
	case !l.pingRead.Before(l.pingWritten):
		return l.pingRead
	}
	return later(l.pingWritten, l.pingPaced)
}

// pingState says where the unanswered PING is, for the keep-alive's error.
func (c *Conn) pingState(pinged, now time.Time) string {
	l := &c.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pingWritten.Before(pinged) {
		return fmt.Sprintf("ping queued %s ago, no write completed for %s", now.Sub(pinged).Round(time.Millisecond),
			now.Sub(l.progress).Round(time.Millisecond))
	}
	return fmt.Sprintf("ping written %s ago", now.Sub(l.pingWritten).Round(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// wrote notes a completed write of n bytes for the keep-alive.
func (l *liveness) wrote(n int64) {
	now := time.Now()
	l.mu.Lock()
	l.progress = now
	l.written += n
	if !l.idleSincePing {
		l.pingPaced = now
	}
	if !l.pingWritten.IsZero() && l.pingRead.Before(l.pingWritten) && l.written-l.pingEnd >= pingReadBound {
		l.pingRead = now
	}
	l.mu.Unlock()
}

// wrotePing notes that everything written so far includes the last PING queued.
func (l *liveness) wrotePing() {
	now := time.Now()
	l.mu.Lock()
	l.pingWritten, l.pingEnd = now, l.written
	l.pingPaced, l.idleSincePing = now, false
	l.mu.Unlock()
}

// wentIdle notes that the writer has written everything queued: writes that complete
// from now on may go into free buffer space, and show nothing of the broker reading.
func (l *liveness) wentIdle() {
	l.mu.Lock()
	l.idleSincePing = true
	l.mu.Unlock()
}

// writeChunk is how much one write may carry under one deadline: the write timeout
// bounds a stall, not the time a large backlog takes on a slow link.
const writeChunk = 1 << 20

// writeAll writes bufs with writev, at most writeChunk bytes per call, each call under
// a fresh deadline. bufs itself is left as it was (the caller reuses it).
func (c *Conn) writeAll(bufs [][]byte) (int64, error) {
	var written int64
	piece := c.spareWrite[:0]
	defer func() { clear(piece[:cap(piece)]); c.spareWrite = piece[:0] }()
	i, off := 0, 0 // the next byte to write is bufs[i][off]
	for i < len(bufs) {
		piece = piece[:0]
		size := 0
		for i < len(bufs) && size < writeChunk {
			b := bufs[i][off:]
			if room := writeChunk - size; len(b) > room {
				piece = append(piece, b[:room])
				off += room
				size += room
				break
			}
			piece = append(piece, b)
			size += len(b)
			i, off = i+1, 0
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
		nb := net.Buffers(piece)
		n, err := nb.WriteTo(c.nc)
		written += n
		if err != nil {
			return written, err
		}
		c.live.wrote(n)
	}
	return written, nil
}

// writeLoop drains the queued frames, many at a time, each write under a deadline.
func (c *Conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		// Take what is queued; producers go on appending to fresh buffers meanwhile.
		c.mu.Lock()
		bufs, tail := c.queue, c.tail
		if len(tail) > 0 {
			bufs = append(bufs, tail)
		}
		ping := c.pingInTail
		c.pingInTail = false
		c.queue, c.tail = c.spareQueue[:0], c.spareTail[:0]
		c.spareQueue, c.spareTail = nil, nil
		c.mu.Unlock()
		if len(bufs) == 0 {
			c.spareQueue, c.spareTail = bufs, tail
			continue
		}
		if n, err := c.writeAll(bufs); err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("%w: no progress for %s after %d bytes: %v", ErrWriteTimeout, c.opts.WriteTimeout, n, err)
			} else {
				err = fmt.Errorf("writing to the broker: %w", err)
			}
			c.closeWith(err)
			return
		}
		if ping {
			c.live.wrotePing()
		}
		c.mu.Lock()
		backlog := len(c.queue) > 0 || len(c.tail) > 0
		c.mu.Unlock()
		if !backlog {
			c.live.wentIdle()
		}
		c.lastSent.Store(time.Now().UnixNano())
		clear(bufs) // drop references to frames the producers own
		if cap(tail) > 4<<20 {
			tail = nil // don't pin a burst's buffer forever
		}
		c.spareQueue, c.spareTail = bufs[:0], tail[:0] // only this goroutine touches the spares
	}
}
