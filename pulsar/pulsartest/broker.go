// Package pulsartest is an in-process fake Pulsar broker that speaks the binary
// protocol, with fault controls (drop connections, close producers, hold or refuse
// receipts, ignore pings, answer SEND with an error) for fast, deterministic tests of
// the client. It complements, never replaces, tests against a real broker.
package pulsartest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Message is one message the fake broker persisted.
type Message struct {
	Topic      string
	Producer   string
	SequenceID uint64
	Payload    []byte
	Key        string
	Properties map[string]string
	LedgerID   uint64
	EntryID    uint64
	BatchIndex int
	Chunk      int // chunk id, or -1
	// SchemaVersion is the version of the producer's schema the message carries (nil: none).
	SchemaVersion []byte
}

// Broker is the fake broker. Its zero value is not usable; call NewBroker.
type Broker struct {
	ln net.Listener
	wg sync.WaitGroup

	// dispatchMu makes each dispatch pick and write its messages before the next one
	// picks any: a subscriber's messages reach it in the order they were queued.
	dispatchMu sync.Mutex

	mu             sync.Mutex
	conns          map[*serverConn]struct{}
	messages       []Message
	entry          uint64
	partitions     map[string]int
	dedup          bool
	highest        map[string]uint64 // topic and producer name (dedupKey) -> highest persisted sequence id
	ignorePings    bool
	holdReceipts   bool
	held           []func()
	dropAfter      int // drop each connection after this many frames received (0: never)
	sendErrors     []pb.ServerError
	maxMessageSize int32
	producerSeq    int
	frames         map[pb.BaseCommand_Type]int
	tlsConfig      *tls.Config
	advertisedHost string
	token          string
	authCheck      func(method string, data []byte) error
	connectAuth    []Credentials
	authResponses  []string
	proxyTargets   []string
	redirects      map[string]redirect
	receiptDelay   time.Duration
	skipReceipts   int
	corruptSends   int
	subs           []*subscriber
	outgoing       map[string][]Outgoing
	acks           []AckRecord
	redelivers     []RedeliverRecord
	seeks          []SeekRecord
	closeAfter     map[pb.BaseCommand_Type]int              // close the connection after answering these
	refuse         map[pb.BaseCommand_Type][]pb.ServerError // answer these with ERROR instead
	uniqueNames    bool                                     // a producer name registered on a topic is busy until closed
	control        Control                                  // SetControl's hook, or nil
	exclusive      map[string]holder                        // topic -> its exclusive producer (access modes)
	topicEpochs    map[string]uint64                        // topic -> its epoch, raised by every exclusive takeover
	fenced         int                                      // producers closed by an ExclusiveWithFencing takeover
	lostProducerOK int                                      // register the next PRODUCERs but never answer them
	slowBytes      int                                      // SlowReading: at most this many bytes per read...
	slowEvery      time.Duration                            // ...and a pause before each read
	schemas        map[string][]*pb.Schema                  // by topic: the registered schemas, version i+1 at i
	enforceSchemas bool                                     // a producer without a schema is refused by a topic with one
	topicList      map[string]struct{}                      // CreateTopic's topics and partitions (nil: none tracked)
	topicWatchers  bool                                     // announce and serve WATCH_TOPIC_LIST
	watchersDeaf   bool                                     // watchers miss every change
	watchers       []*topicWatcher
}

// UniqueProducerNames makes a producer name busy on its topic while a producer of that
// name is registered (ProducerBusy to another), as on the broker.
func (b *Broker) UniqueProducerNames(on bool) { b.mu.Lock(); b.uniqueNames = on; b.mu.Unlock() }

// LoseProducerSuccess registers the next n producers but never answers them, as a
// broker whose answer comes after the client gave up.
func (b *Broker) LoseProducerSuccess(n int) { b.mu.Lock(); b.lostProducerOK = n; b.mu.Unlock() }

// NewBroker starts a fake broker on a loopback port.
func NewBroker(opts ...Option) (*Broker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Broker{ln: ln, conns: map[*serverConn]struct{}{}, partitions: map[string]int{}, highest: map[string]uint64{},
		frames: map[pb.BaseCommand_Type]int{}, maxMessageSize: frame.DefaultMaxMessageSize, entry: 0,
		redirects: map[string]redirect{}, outgoing: map[string][]Outgoing{}, exclusive: map[string]holder{}, topicEpochs: map[string]uint64{}}
	for _, o := range opts {
		o(b)
	}
	if b.tlsConfig != nil {
		b.ln = tls.NewListener(ln, b.tlsConfig)
	}
	b.wg.Add(1)
	go b.accept()
	return b, nil
}

// Option configures a Broker at start.
type Option func(*Broker)

// WithTLS makes the broker accept only TLS connections with cfg (its URL turns pulsar+ssl://).
func WithTLS(cfg *tls.Config) Option { return func(b *Broker) { b.tlsConfig = cfg } }

// WithAdvertisedHost makes URL (and so the lookup answers) name host instead of the
// listener's IP address, as a broker advertising its DNS name does.
func WithAdvertisedHost(host string) Option { return func(b *Broker) { b.advertisedHost = host } }

// WithToken makes the broker require token authentication with this token; SetToken
// changes it later (a rotation, for AUTH_CHALLENGE tests).
func WithToken(token string) Option { return func(b *Broker) { b.token = token } }

// WithAuthenticator makes the broker check the credentials of every CONNECT and
// AUTH_RESPONSE with check (instead of one token): an error refuses CONNECT with
// AuthenticationError and the error's text, and closes the connection of an
// AUTH_RESPONSE, as the broker does.
func WithAuthenticator(check func(method string, data []byte) error) Option {
	return func(b *Broker) { b.authCheck = check }
}

// Credentials are the auth method and data of one CONNECT.
type Credentials struct {
	Method string
	Data   string
}

// ConnectCredentials returns the credentials of every CONNECT received, in order.
func (b *Broker) ConnectCredentials() []Credentials {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Credentials(nil), b.connectAuth...)
}

type redirect struct {
	url   string
	proxy bool
}

// URL is the broker's pulsar:// (or, with TLS, pulsar+ssl://) URL.
func (b *Broker) URL() string {
	addr := b.ln.Addr().String()
	if b.advertisedHost != "" {
		_, port, _ := net.SplitHostPort(addr)
		addr = net.JoinHostPort(b.advertisedHost, port)
	}
	if b.tlsConfig != nil {
		return "pulsar+ssl://" + addr
	}
	return "pulsar://" + addr
}

// SetToken changes the token the broker accepts.
func (b *Broker) SetToken(t string) { b.mu.Lock(); b.token = t; b.mu.Unlock() }

// ChallengeAuth sends AUTH_CHALLENGE on every connection; the answers show in AuthResponses.
func (b *Broker) ChallengeAuth() {
	for _, c := range b.connections() {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			ServerVersion: proto.String("pulsartest"), Challenge: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte("refresh")}}})
	}
}

// AuthResponses returns the credentials received in AUTH_RESPONSE frames, in order.
func (b *Broker) AuthResponses() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.authResponses...)
}

// ProxyTargets returns the proxy_to_broker_url of every CONNECT that carried one.
func (b *Broker) ProxyTargets() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.proxyTargets...)
}

// Redirect answers lookups of topic with a redirect to url; with proxy, it answers
// Connect to url with proxy_through_service_url set, so the client must come back
// through this broker asking to be proxied to url.
func (b *Broker) Redirect(topic, url string, proxy bool) {
	b.mu.Lock()
	b.redirects[topic] = redirect{url, proxy}
	b.mu.Unlock()
}

// CorruptNextSends flips a payload bit in the next n SEND frames as they arrive; the
// broker then answers each with SEND_ERROR ChecksumError, as a real broker does.
func (b *Broker) CorruptNextSends(n int) { b.mu.Lock(); b.corruptSends = n; b.mu.Unlock() }

// SetReceiptDelay sends each receipt d after the message was persisted.
func (b *Broker) SetReceiptDelay(d time.Duration) { b.mu.Lock(); b.receiptDelay = d; b.mu.Unlock() }

// SkipReceipts persists the next n messages without ever answering them, so the next
// receipt the client sees is ahead of its oldest pending message.
func (b *Broker) SkipReceipts(n int) { b.mu.Lock(); b.skipReceipts = n; b.mu.Unlock() }

// MigrateProducers sends TOPIC_MIGRATED for every registered producer, pointing at url.
func (b *Broker) MigrateProducers(url string) {
	b.mu.Lock()
	var todo []func()
	for c := range b.conns {
		for id := range c.producers {
			c, id := c, id
			todo = append(todo, func() {
				c.write(&pb.BaseCommand{Type: pb.BaseCommand_TOPIC_MIGRATED.Enum(), TopicMigrated: &pb.CommandTopicMigrated{
					ResourceId: proto.Uint64(id), ResourceType: pb.CommandTopicMigrated_Producer.Enum(), BrokerServiceUrl: proto.String(url)}})
			})
		}
		c.producers = map[uint64]string{}
	}
	b.mu.Unlock()
	for _, f := range todo {
		f()
	}
}

func (b *Broker) connections() []*serverConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*serverConn, 0, len(b.conns))
	for c := range b.conns {
		out = append(out, c)
	}
	return out
}

// Close stops the broker and waits for its goroutines.
func (b *Broker) Close() {
	b.ln.Close()
	b.DropConnections()
	b.wg.Wait()
}

func (b *Broker) accept() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return
		}
		c := &serverConn{b: b, nc: nc, producers: map[uint64]string{}, names: map[uint64]string{}, gone: make(chan struct{})}
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go c.serve()
	}
}

// SetPartitions makes topic a partitioned topic with n partitions.
func (b *Broker) SetPartitions(topic string, n int) {
	b.mu.Lock()
	b.partitions[topic] = n
	b.mu.Unlock()
}

// SetDeduplication emulates broker deduplication: a SEND whose sequence id is not above
// the producer's highest persisted one is answered with ledger and entry -1 and not stored.
func (b *Broker) SetDeduplication(on bool) { b.mu.Lock(); b.dedup = on; b.mu.Unlock() }

// StopReading freezes every open connection, as a stopped JVM or a black-holed network
// would: nothing more is read from it (the client's socket buffers fill and its writes
// block) and nothing more is sent on it, until the client or Close ends it.
// Connections made later are served normally.
func (b *Broker) StopReading() {
	b.mu.Lock()
	for c := range b.conns {
		c.frozen = true
	}
	b.mu.Unlock()
}

// SlowReading makes the broker read every connection at most n bytes at a time, each
// read after a pause of every, as a broker starved of CPU does: the client's writes make
// progress, slowly, and what it queued behind them (a PING) reaches the broker late.
// n <= 0 reads at full speed again.
func (b *Broker) SlowReading(n int, every time.Duration) {
	b.mu.Lock()
	b.slowBytes, b.slowEvery = n, every
	b.mu.Unlock()
}

// throttledReader is a connection's reader under SlowReading.
type throttledReader struct{ c *serverConn }

func (t throttledReader) Read(p []byte) (int, error) {
	t.c.b.mu.Lock()
	n, every := t.c.b.slowBytes, t.c.b.slowEvery
	t.c.b.mu.Unlock()
	if n <= 0 {
		return t.c.nc.Read(p)
	}
	timer := time.NewTimer(every)
	defer timer.Stop()
	select {
	case <-t.c.gone:
		return 0, net.ErrClosed
	case <-timer.C:
	}
	return t.c.nc.Read(p[:min(len(p), n)])
}

// SetIgnorePings makes the broker stop answering PING (a dead peer).
func (b *Broker) SetIgnorePings(on bool) { b.mu.Lock(); b.ignorePings = on; b.mu.Unlock() }

// SetMaxMessageSize sets the limit announced in CONNECTED for new connections.
func (b *Broker) SetMaxMessageSize(n int) { b.mu.Lock(); b.maxMessageSize = int32(n); b.mu.Unlock() }

// HoldReceipts persists messages but withholds their receipts (and the ChecksumError
// refusals of CorruptNextSends) until released; releasing sends the held answers in
// order on their (possibly dead) connections.
func (b *Broker) HoldReceipts(on bool) {
	if on {
		b.mu.Lock()
		b.holdReceipts = true
		b.mu.Unlock()
		return
	}
	// Release in order, as a broker answers one producer: receipts of SENDs that arrive
	// while the held ones are replayed are held too and replayed after them, never
	// answered ahead of them.
	for {
		b.mu.Lock()
		held := b.held
		b.held = nil
		if len(held) == 0 {
			b.holdReceipts = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		for _, f := range held {
			f()
		}
	}
}

// ReleaseReceipts sends the n oldest held answers (receipts, and the ChecksumError
// refusals of CorruptNextSends held with them), in order, and goes on holding the rest
// and what comes next: a test lets the client read one answer before the next.
func (b *Broker) ReleaseReceipts(n int) {
	b.mu.Lock()
	n = min(n, len(b.held))
	first := b.held[:n:n]
	b.held = append([]func(){}, b.held[n:]...)
	b.mu.Unlock()
	for _, f := range first {
		f()
	}
}

// DropAfterFrames closes every connection once it has received n more frames (0 disables).
func (b *Broker) DropAfterFrames(n int) { b.mu.Lock(); b.dropAfter = n; b.mu.Unlock() }

// FailNextSends answers the next SENDs with these errors, one each, instead of persisting.
func (b *Broker) FailNextSends(codes ...int32) {
	b.mu.Lock()
	for _, c := range codes {
		b.sendErrors = append(b.sendErrors, pb.ServerError(c))
	}
	b.mu.Unlock()
}

// CloseAfterAnswering makes the broker close the connection right after it answered the
// next n commands of type t (PRODUCER or SUBSCRIBE): the answer and the close reach the
// client back to back, the race a registration must survive.
func (b *Broker) CloseAfterAnswering(t CommandType, n int) {
	b.mu.Lock()
	if b.closeAfter == nil {
		b.closeAfter = map[pb.BaseCommand_Type]int{}
	}
	b.closeAfter[t] = n
	b.mu.Unlock()
}

// RefuseNext answers the next commands of type t with an error of these codes, one
// each, instead of serving them: ERROR for a command with a request id (PRODUCER,
// SUBSCRIBE, LOOKUP, PARTITIONED_METADATA, ...), SEND_ERROR for SEND.
func (b *Broker) RefuseNext(t CommandType, codes ...ServerError) {
	b.mu.Lock()
	if b.refuse == nil {
		b.refuse = map[pb.BaseCommand_Type][]pb.ServerError{}
	}
	b.refuse[t] = append(b.refuse[t], codes...)
	b.mu.Unlock()
}

// Refusals returns how many RefuseNext codes for t are still unused.
func (b *Broker) Refusals(t CommandType) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.refuse[t])
}

// DropConnections closes every client connection now.
func (b *Broker) DropConnections() {
	b.mu.Lock()
	conns := make([]*serverConn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.held = nil
	// Their subscribers go now, not when each connection's reader notices: a message
	// delivered after this call goes to a subscriber that is still connected.
	kept := b.subs[:0]
	for _, s := range b.subs {
		if _, dropped := b.conns[s.c]; !dropped {
			kept = append(kept, s)
		}
	}
	b.subs = kept
	b.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// CloseProducers sends CLOSE_PRODUCER for every registered producer (a topic unload).
func (b *Broker) CloseProducers() {
	b.mu.Lock()
	var todo []func()
	for c := range b.conns {
		for id := range c.producers {
			c := c
			id := id
			todo = append(todo, func() {
				c.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(0)}})
			})
		}
		c.producers = map[uint64]string{}
	}
	b.mu.Unlock()
	for _, f := range todo {
		f()
	}
}

// Messages returns what was persisted on topic, in order.
func (b *Broker) Messages(topic string) []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Message
	for _, m := range b.messages {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// Frames returns how many frames of a type the broker received.
func (b *Broker) Frames(t CommandType) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frames[t]
}

// Connections returns the number of open client connections.
func (b *Broker) Connections() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.conns) }

type serverConn struct {
	b         *Broker
	nc        net.Conn
	wmu       sync.Mutex
	producers map[uint64]string // id -> topic; guarded by b.mu
	names     map[uint64]string // id -> producer name; guarded by b.mu
	received  int
	frozen    bool // StopReading; guarded by b.mu
	gone      chan struct{}
	killOnce  sync.Once
}

func (c *serverConn) kill() {
	c.killOnce.Do(func() {
		close(c.gone)
		c.nc.Close()
	})
}

func (c *serverConn) isFrozen() bool {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.frozen
}

func (c *serverConn) write(cmd *pb.BaseCommand) {
	buf, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		panic(err)
	}
	c.writeRaw(buf)
}

func (c *serverConn) writeRaw(buf []byte) {
	if c.isFrozen() {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.nc.Write(buf)
}

func (c *serverConn) serve() {
	defer c.b.wg.Done()
	defer func() {
		c.kill()
		c.b.mu.Lock()
		delete(c.b.conns, c)
		kept := c.b.subs[:0]
		for _, s := range c.b.subs {
			if s.c != c {
				kept = append(kept, s)
			}
		}
		c.b.subs = kept
		c.b.watchers = slices.DeleteFunc(c.b.watchers, func(w *topicWatcher) bool { return w.c == c })
		c.b.mu.Unlock()
	}()
	br := bufio.NewReader(throttledReader{c})
	for {
		var prefix [4]byte
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		if c.isFrozen() {
			<-c.gone // read nothing more until the connection ends
			return
		}
		n := binary.BigEndian.Uint32(prefix[:])
		c.b.mu.Lock()
		limit := int(c.b.maxMessageSize) + frame.Padding
		c.b.mu.Unlock()
		if int64(n) > int64(limit) {
			return // what a broker does with a frame above its limit: close the connection
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		c.b.mu.Lock()
		if c.b.corruptSends > 0 && len(body) > 0 {
			var peek frame.Frame
			if frame.Decode(body, &peek) == nil && peek.Cmd.GetType() == pb.BaseCommand_SEND {
				c.b.corruptSends--
				body[len(body)-1] ^= 0xff // as if a bit flipped on the way
			}
		}
		c.b.mu.Unlock()
		var f frame.Frame
		if err := frame.Decode(body, &f); err != nil {
			if errors.Is(err, frame.ErrChecksum) && f.Cmd.GetType() == pb.BaseCommand_SEND {
				// What a broker does with a corrupt message: refuse it, keep the connection.
				// Held with the receipts while they are held: a broker answers one
				// producer's SENDs in order.
				s := f.Cmd.GetSend()
				refusal := &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
					ProducerId: s.ProducerId, SequenceId: s.SequenceId, Error: pb.ServerError_ChecksumError.Enum(),
					Message: proto.String("pulsartest: checksum mismatch")}}
				c.b.mu.Lock()
				if c.b.holdReceipts {
					c.b.held = append(c.b.held, func() { c.write(refusal) })
					c.b.mu.Unlock()
					continue
				}
				c.b.mu.Unlock()
				c.write(refusal)
				continue
			}
			return
		}
		c.b.mu.Lock()
		c.b.frames[f.Cmd.GetType()]++
		c.received++
		drop := c.b.dropAfter > 0 && c.received >= c.b.dropAfter
		c.b.mu.Unlock()
		if drop {
			return
		}
		if c.refused(&f) {
			continue
		}
		if handled, closeConn := c.controlled(&f); closeConn {
			return
		} else if handled {
			continue
		}
		// Decided before answering, so the client cannot see the answer before the
		// close is committed to.
		c.b.mu.Lock()
		closeNow := c.b.closeAfter[f.Cmd.GetType()] > 0
		if closeNow {
			c.b.closeAfter[f.Cmd.GetType()]--
		}
		c.b.mu.Unlock()
		c.handle(&f)
		if closeNow {
			return
		}
	}
}

// refused answers f with an injected ERROR when RefuseNext asked for one.
func (c *serverConn) refused(f *frame.Frame) bool {
	t := f.Cmd.GetType()
	c.b.mu.Lock()
	codes := c.b.refuse[t]
	if len(codes) == 0 {
		c.b.mu.Unlock()
		return false
	}
	code := codes[0]
	c.b.refuse[t] = codes[1:]
	c.b.mu.Unlock()
	return c.answerError(f, code, "injected by pulsartest")
}

func (c *serverConn) handle(f *frame.Frame) {
	cmd := f.Cmd
	b := c.b
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		cc := cmd.GetConnect()
		b.mu.Lock()
		max, token, check, watchers := b.maxMessageSize, b.token, b.authCheck, b.topicWatchers
		if cc.ProxyToBrokerUrl != nil {
			b.proxyTargets = append(b.proxyTargets, cc.GetProxyToBrokerUrl())
		}
		b.connectAuth = append(b.connectAuth, Credentials{cc.GetAuthMethodName(), string(cc.GetAuthData())})
		b.mu.Unlock()
		if check != nil {
			if err := check(cc.GetAuthMethodName(), cc.GetAuthData()); err != nil {
				c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
					Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String(err.Error())}})
				c.nc.Close()
				return
			}
		}
		if token != "" && (cc.GetAuthMethodName() != "token" || string(cc.GetAuthData()) != token) {
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
				Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String("pulsartest: bad or missing token")}})
			c.nc.Close()
			return
		}
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
			ServerVersion: proto.String("pulsartest"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(max),
			FeatureFlags: &pb.FeatureFlags{SupportsTopicWatchers: proto.Bool(watchers)}}})
	case pb.BaseCommand_PING:
		b.mu.Lock()
		ignore := b.ignorePings
		b.mu.Unlock()
		if !ignore {
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	case pb.BaseCommand_PARTITIONED_METADATA:
		r := cmd.GetPartitionMetadata()
		b.mu.Lock()
		n := b.partitions[r.GetTopic()]
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(r.GetRequestId()), Partitions: proto.Uint32(uint32(n)), Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}})
	case pb.BaseCommand_AUTH_RESPONSE:
		data := string(cmd.GetAuthResponse().GetResponse().GetAuthData())
		b.mu.Lock()
		b.authResponses = append(b.authResponses, data)
		token, check := b.token, b.authCheck
		b.mu.Unlock()
		if (token != "" && data != token) || (check != nil && check(cmd.GetAuthResponse().GetResponse().GetAuthMethodName(), []byte(data)) != nil) {
			c.nc.Close()
		}
	case pb.BaseCommand_LOOKUP:
		r := cmd.GetLookupTopic()
		b.mu.Lock()
		rd, ok := b.redirects[r.GetTopic()]
		b.mu.Unlock()
		if ok {
			resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(r.GetRequestId()), BrokerServiceUrl: proto.String(rd.url),
				BrokerServiceUrlTls: proto.String(rd.url), Authoritative: proto.Bool(true), Response: pb.CommandLookupTopicResponse_Redirect.Enum()}
			if rd.proxy {
				resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
				resp.ProxyThroughServiceUrl = proto.Bool(true)
			}
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
			return
		}
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
			RequestId: proto.Uint64(r.GetRequestId()), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(b.URL()), BrokerServiceUrlTls: proto.String(b.URL()), Authoritative: proto.Bool(true)}})
	case pb.BaseCommand_PRODUCER:
		r := cmd.GetProducer()
		b.mu.Lock()
		name := r.GetProducerName()
		if name == "" {
			b.producerSeq++
			name = fmt.Sprintf("pulsartest-%d", b.producerSeq)
		}
		topicEpoch, code, msg, fence := b.accessLocked(c, r, name)
		if code == nil && b.uniqueNames && b.nameBusyLocked(r.GetTopic(), name) {
			code, msg = pb.ServerError_ProducerBusy.Enum(), "Producer with name '"+name+"' is already connected to topic"
		}
		if code != nil {
			b.mu.Unlock()
			fence()
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(r.GetRequestId()),
				Error: code, Message: proto.String(msg)}})
			return
		}
		version, refusal := b.checkSchemaLocked(r.GetTopic(), r.GetSchema())
		if refusal != "" {
			b.mu.Unlock()
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: proto.Uint64(r.GetRequestId()),
				Error: pb.ServerError_IncompatibleSchema.Enum(), Message: proto.String(refusal)}})
			return
		}
		c.producers[r.GetProducerId()] = r.GetTopic()
		c.names[r.GetProducerId()] = name
		last := int64(-1)
		if h, ok := b.highest[dedupKey(r.GetTopic(), name)]; ok && b.dedup {
			last = int64(h)
		}
		if b.lostProducerOK > 0 {
			b.lostProducerOK--
			b.mu.Unlock()
			fence()
			return
		}
		b.mu.Unlock()
		fence()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: proto.Uint64(r.GetRequestId()), ProducerName: proto.String(name), LastSequenceId: proto.Int64(last), SchemaVersion: version, TopicEpoch: topicEpoch}})
	case pb.BaseCommand_GET_SCHEMA:
		r := cmd.GetGetSchema()
		b.mu.Lock()
		list := b.schemas[r.GetTopic()]
		b.mu.Unlock()
		resp := &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(r.GetRequestId())}
		v := len(list)
		if len(r.GetSchemaVersion()) == 8 {
			v = int(binary.BigEndian.Uint64(r.GetSchemaVersion()))
		}
		if v < 1 || v > len(list) {
			resp.ErrorCode, resp.ErrorMessage = pb.ServerError_TopicNotFound.Enum(), proto.String("No schema found for topic "+r.GetTopic())
		} else {
			resp.Schema, resp.SchemaVersion = list[v-1], schemaVersion(v)
		}
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: resp})
	case pb.BaseCommand_CLOSE_PRODUCER:
		r := cmd.GetCloseProducer()
		b.mu.Lock()
		delete(c.producers, r.GetProducerId())
		delete(c.names, r.GetProducerId())
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(r.GetRequestId())}})
	case pb.BaseCommand_SEND:
		c.send(f)
	case pb.BaseCommand_SUBSCRIBE:
		c.subscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		c.flow(cmd.GetFlow())
	case pb.BaseCommand_ACK:
		c.ack(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.redeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.closeConsumer(cmd.GetCloseConsumer())
	case pb.BaseCommand_SEEK:
		c.seek(cmd.GetSeek())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.getTopics(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_WATCH_TOPIC_LIST:
		c.watchTopics(cmd.GetWatchTopicList())
	case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
		c.closeWatcher(cmd.GetWatchTopicListClose())
	}
}

func (c *serverConn) send(f *frame.Frame) {
	b := c.b
	s := f.Cmd.GetSend()
	md := &pb.MessageMetadata{}
	if err := proto.Unmarshal(f.Metadata, md); err != nil {
		return
	}
	b.mu.Lock()
	if len(b.sendErrors) > 0 {
		code := b.sendErrors[0]
		b.sendErrors = b.sendErrors[1:]
		b.mu.Unlock()
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: s.ProducerId, SequenceId: s.SequenceId, Error: code.Enum(), Message: proto.String("injected by pulsartest")}})
		return
	}
	topic, ok := c.producers[s.GetProducerId()]
	if !ok {
		b.mu.Unlock()
		return
	}
	highest := s.GetSequenceId()
	if s.GetHighestSequenceId() > highest {
		highest = s.GetHighestSequenceId()
	}
	var ledger, entry uint64
	if h, seen := b.highest[dedupKey(topic, md.GetProducerName())]; b.dedup && seen && highest <= h && !(s.GetIsChunk() && md.GetChunkId() > 0 && highest == h) {
		ledger, entry = ^uint64(0), ^uint64(0)
	} else {
		b.entry++
		ledger, entry = 1, b.entry
		if !s.GetIsChunk() || md.GetChunkId() == md.GetNumChunksFromMsg()-1 {
			b.highest[dedupKey(topic, md.GetProducerName())] = highest
		}
		b.messages = append(b.messages, decodeMessages(topic, md, f.Payload, ledger, entry)...)
	}
	receipt := &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
		ProducerId: s.ProducerId, SequenceId: s.SequenceId, HighestSequenceId: s.HighestSequenceId,
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}}}
	switch {
	case b.skipReceipts > 0:
		b.skipReceipts--
	case b.holdReceipts:
		b.held = append(b.held, func() { c.write(receipt) })
	case b.receiptDelay > 0:
		b.wg.Add(1)
		time.AfterFunc(b.receiptDelay, func() {
			defer b.wg.Done()
			c.write(receipt)
		})
	default:
		b.mu.Unlock()
		c.write(receipt)
		return
	}
	b.mu.Unlock()
}

// holder is a topic's exclusive producer.
type holder struct {
	c  *serverConn
	id uint64
}

// exclusiveLocked is topic's exclusive producer, if it is still registered.
func (b *Broker) exclusiveLocked(topic string) (holder, bool) {
	h, ok := b.exclusive[topic]
	if !ok {
		return h, false
	}
	if _, open := b.conns[h.c]; !open || h.c.producers[h.id] != topic {
		delete(b.exclusive, topic)
		return h, false
	}
	return h, true
}

// accessLocked applies r's access mode as the broker does: a shared producer is refused
// (ProducerBusy) while the topic has an exclusive one; an Exclusive one (ProducerFenced)
// while the topic has any producer; an ExclusiveWithFencing one closes every producer of
// the topic (fence, to run once b.mu is released) and is fenced itself when the topic
// epoch it brings is older than the topic's. An exclusive producer accepted becomes the
// topic's holder, with the epoch it brings or the next one, which it is answered.
func (b *Broker) accessLocked(c *serverConn, r *pb.CommandProducer, name string) (epoch *uint64, code *pb.ServerError, msg string, fence func()) {
	topic := r.GetTopic()
	fence = func() {}
	_, held := b.exclusiveLocked(topic)
	mode := r.GetProducerAccessMode()
	switch mode {
	case pb.ProducerAccessMode_Shared:
		if held {
			return nil, pb.ServerError_ProducerBusy.Enum(), "Topic has an existing exclusive producer", fence
		}
		return nil, nil, "", fence
	case pb.ProducerAccessMode_Exclusive:
		if held || b.producersOnLocked(topic) > 0 {
			return nil, pb.ServerError_ProducerFenced.Enum(), "Topic has an existing producer", fence
		}
	case pb.ProducerAccessMode_ExclusiveWithFencing:
		var closes []func()
		for oc := range b.conns {
			for id, t := range oc.producers {
				if t != topic {
					continue
				}
				delete(oc.producers, id)
				delete(oc.names, id)
				b.fenced++
				closes = append(closes, func() {
					oc.write(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(0)}})
				})
			}
		}
		delete(b.exclusive, topic)
		fence = func() {
			for _, f := range closes {
				f()
			}
		}
	default:
		return nil, pb.ServerError_NotAllowedError.Enum(), "pulsartest: access mode " + mode.String() + " is not supported", fence
	}
	cur, known := b.topicEpochs[topic]
	if r.TopicEpoch != nil && known && r.GetTopicEpoch() < cur {
		return nil, pb.ServerError_ProducerFenced.Enum(), fmt.Sprintf("Topic epoch has already moved. Current epoch: %d, Producer epoch: %d", cur, r.GetTopicEpoch()), fence
	}
	next := cur + 1
	if r.TopicEpoch != nil {
		next = r.GetTopicEpoch()
	}
	b.topicEpochs[topic] = next
	b.exclusive[topic] = holder{c: c, id: r.GetProducerId()}
	return proto.Uint64(next), nil, "", fence
}

// producersOnLocked counts the producers registered on topic.
func (b *Broker) producersOnLocked(topic string) int {
	n := 0
	for c := range b.conns {
		for _, t := range c.producers {
			if t == topic {
				n++
			}
		}
	}
	return n
}

// FencedProducers is how many producers ExclusiveWithFencing takeovers closed.
func (b *Broker) FencedProducers() int { b.mu.Lock(); defer b.mu.Unlock(); return b.fenced }

// nameBusyLocked reports whether a producer named name is registered on topic on a
// connection that is still open.
func (b *Broker) nameBusyLocked(topic, name string) bool {
	for c := range b.conns {
		for id, t := range c.producers {
			if t == topic && c.names[id] == name {
				return true
			}
		}
	}
	return false
}

// dedupKey keys deduplication state, per topic (partition) and producer name, as the broker does.
// EnforceSchemas makes a topic with a schema refuse producers that declare none, as a
// namespace with schemaValidationEnforced does.
func (b *Broker) EnforceSchemas(on bool) { b.mu.Lock(); b.enforceSchemas = on; b.mu.Unlock() }

// Schemas returns the schemas registered for topic, oldest first (the version of the
// i-th is i+1, eight bytes big-endian on the wire).
func (b *Broker) Schemas(topic string) []*Schema {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.schemas[topic])
}

// checkSchemaLocked registers or checks a producer's schema. The fake's compatibility
// rule: a schema of another type than the topic's is refused; one of the same type is a
// new version unless it equals one already registered.
func (b *Broker) checkSchemaLocked(topic string, s *pb.Schema) ([]byte, string) {
	list := b.schemas[topic]
	if s == nil || s.GetType() == pb.Schema_None {
		if len(list) > 0 && b.enforceSchemas {
			return nil, "Producers cannot connect or send message without a schema to topics with a schema if SchemaValidationEnforced is enabled"
		}
		return nil, ""
	}
	for i, old := range list {
		if old.GetType() == s.GetType() && bytes.Equal(old.GetSchemaData(), s.GetSchemaData()) {
			return schemaVersion(i + 1), ""
		}
	}
	if len(list) > 0 && list[len(list)-1].GetType() != s.GetType() {
		return nil, fmt.Sprintf("Incompatible schema: the topic's schema is %s, the producer's %s", list[len(list)-1].GetType(), s.GetType())
	}
	if b.schemas == nil {
		b.schemas = map[string][]*pb.Schema{}
	}
	b.schemas[topic] = append(list, proto.Clone(s).(*pb.Schema))
	return schemaVersion(len(list) + 1), ""
}

func schemaVersion(v int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func dedupKey(topic, producer string) string { return topic + "\x00" + producer }

func decodeMessages(topic string, md *pb.MessageMetadata, payload []byte, ledger, entry uint64) []Message {
	chunk := -1
	if md.NumChunksFromMsg != nil {
		chunk = int(md.GetChunkId())
	}
	if md.NumMessagesInBatch == nil {
		return []Message{{Topic: topic, Producer: md.GetProducerName(), SequenceID: md.GetSequenceId(), Payload: payload,
			Key: md.GetPartitionKey(), Properties: props(md.GetProperties()), LedgerID: ledger, EntryID: entry, BatchIndex: -1, Chunk: chunk,
			SchemaVersion: md.GetSchemaVersion()}}
	}
	var out []Message
	for i := 0; len(payload) >= 4; i++ {
		n := binary.BigEndian.Uint32(payload)
		if int(n) > len(payload)-4 {
			break
		}
		smd := &pb.SingleMessageMetadata{}
		if proto.Unmarshal(payload[4:4+n], smd) != nil {
			break
		}
		rest := payload[4+n:]
		size := int(smd.GetPayloadSize())
		if size > len(rest) {
			break
		}
		out = append(out, Message{Topic: topic, Producer: md.GetProducerName(), SequenceID: smd.GetSequenceId(), Payload: rest[:size],
			Key: smd.GetPartitionKey(), Properties: props(smd.GetProperties()), LedgerID: ledger, EntryID: entry, BatchIndex: i, Chunk: -1,
			SchemaVersion: md.GetSchemaVersion()})
		payload = rest[size:]
	}
	return out
}

func props(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}
