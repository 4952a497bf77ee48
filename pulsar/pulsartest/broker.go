// Package pulsartest is an in-process fake Pulsar broker that speaks the binary
// protocol, with fault controls (drop connections, close producers, hold or refuse
// receipts, ignore pings, answer SEND with an error) for fast, deterministic tests of
// the client. It complements, never replaces, tests against a real broker.
package pulsartest

import (
	"crypto/tls"
	"net"
	"sync"
	"time"

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

// Frames returns how many frames of a type the broker received.
func (b *Broker) Frames(t CommandType) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frames[t]
}

// Connections returns the number of open client connections.
func (b *Broker) Connections() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.conns) }
