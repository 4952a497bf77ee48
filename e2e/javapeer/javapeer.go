// Package javapeer runs Apache Pulsar's reference Java client (Peer.java, compiled against
// the fetched Pulsar distribution's jars) as a peer of the bridge in e2e tests: it
// produces and consumes by a JSON spec and reports every message as a JSON line.
//
// The classes are compiled once per test binary by internal/javatest into a cache
// directory named after the sources' SHA-256, so later runs reuse them.
// Without java/javac or the distribution the tests that need the peer are skipped.
package javapeer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/javatest"
)

// Spec is one run of the peer; the field meanings and defaults are Peer.java's Spec.
type Spec struct {
	Op    string `json:"op"` // set by Produce and Consume
	URL   string `json:"url,omitempty"`
	Topic string `json:"topic"`
	// produce
	Count            int    `json:"count"` // consume: 0 reads until TimeoutMs passes without a message
	Seed             int64  `json:"seed,omitempty"`
	Size             int    `json:"size,omitempty"`
	Sizes            []int  `json:"sizes,omitempty"`
	Compression      string `json:"compression,omitempty"` // NONE LZ4 ZLIB ZSTD SNAPPY
	NoBatching       bool   `json:"-"`
	BatchMaxMessages int    `json:"batchMaxMessages,omitempty"`
	BatchMaxBytes    int    `json:"batchMaxBytes,omitempty"`
	BatchDelayMs     int    `json:"batchDelayMs,omitempty"`
	Chunking         bool   `json:"chunking,omitempty"`
	ChunkMaxBytes    int    `json:"chunkMaxBytes,omitempty"`
	Keys             int    `json:"keys,omitempty"`
	OrderingKeys     bool   `json:"orderingKeys,omitempty"`
	Properties       bool   `json:"properties,omitempty"`
	EventTime        int64  `json:"eventTime,omitempty"`
	Hashing          string `json:"hashing,omitempty"`   // JavaStringHash (the Java client's default) | Murmur3_32Hash
	KeyPrefix        string `json:"keyPrefix,omitempty"` // keys are KeyPrefix + (i % Keys) ["k"]
	EncryptKey       string `json:"encryptKey,omitempty"`
	PublicKey        string `json:"publicKey,omitempty"`
	Schema           string `json:"schema,omitempty"` // BYTES | JSON
	SendTimeoutMs    int    `json:"sendTimeoutMs,omitempty"`
	// consume
	Subscription       string   `json:"subscription,omitempty"`
	Type               string   `json:"type,omitempty"` // Exclusive Shared Failover Key_Shared
	Position           string   `json:"position,omitempty"`
	TimeoutMs          int      `json:"timeoutMs,omitempty"` // stop after this long without a message
	BatchIndexAck      bool     `json:"batchIndexAck,omitempty"`
	Ack                string   `json:"ack,omitempty"` // all | none | mod
	AckMod             int      `json:"ackMod,omitempty"`
	AckRem             int      `json:"ackRem,omitempty"`
	Nack               string   `json:"nack,omitempty"` // "" | all | mod
	NegativeAckDelayMs int      `json:"negativeAckDelayMs,omitempty"`
	DLQMaxRedeliver    int      `json:"dlqMaxRedeliver,omitempty"`
	DLQTopic           string   `json:"dlqTopic,omitempty"`
	DLQSubscription    string   `json:"dlqInitialSubscription,omitempty"`
	NackSHA256         []string `json:"nackSha256,omitempty"` // nack every delivery of these payloads, ack the rest
	PrivateKey         string   `json:"privateKey,omitempty"`
	CryptoFailure      string   `json:"cryptoFailure,omitempty"` // FAIL DISCARD CONSUME
	AckTimeoutMs       int      `json:"ackTimeoutMs,omitempty"`
	// SeekTime (Unix ms) or SeekID (ledger:entry:partition:batchIndex of a message the
	// first pass receives): after the first pass the consumer seeks there and reads
	// again until TimeoutMs passes without a message; those lines have Phase 2.
	SeekTime      int64  `json:"seekTime,omitempty"`
	SeekID        string `json:"seekId,omitempty"`
	Token         string `json:"token,omitempty"`         // authentication token; none when empty
	Payloads      bool   `json:"payloads,omitempty"`      // consume: report each payload (Message.Payload)
	TopicsPattern string `json:"topicsPattern,omitempty"` // consume: the topics the pattern matches, instead of Topic
}

// MarshalJSON writes Batching as the peer's "batching" (default on, hence the negation).
func (s Spec) MarshalJSON() ([]byte, error) {
	type plain Spec
	return json.Marshal(struct {
		plain
		Batching bool `json:"batching"`
	}{plain(s), !s.NoBatching})
}

// ID is a message id as the Java client reports it.
type ID struct {
	Ledger     int64  `json:"ledger"`
	Entry      int64  `json:"entry"`
	Partition  int    `json:"partition"`
	BatchIndex int    `json:"batchIndex"`
	BatchSize  int    `json:"batchSize"`
	Text       string `json:"text"`
}

// Message is one line of the peer's output: a message sent (produce) or received (consume).
type Message struct {
	I               int               `json:"i"`
	Phase           int               `json:"phase"` // consume: 1, or 2 after the seek
	ID              ID                `json:"id"`
	Topic           string            `json:"topic"`
	Key             string            `json:"key"`
	OrderingKey     string            `json:"orderingKey"`
	Properties      map[string]string `json:"properties"`
	EventTime       int64             `json:"eventTime"`
	PublishTime     int64             `json:"publishTime"`
	RedeliveryCount int               `json:"redeliveryCount"`
	SHA256          string            `json:"sha256"`
	Size            int               `json:"size"`
	Action          string            `json:"action"`  // consume: ack, nack or none
	Error           string            `json:"error"`   // produce: the send failed
	Payload         string            `json:"payload"` // consume with Spec.Payloads: the payload as UTF-8
}

// Summary is the peer's last line.
type Summary struct {
	Sent, Failed            int
	Received, Acked, Nacked int
	Stderr                  string // the client's log (its tail)
}

func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// DistDir is the fetched Pulsar distribution the peer runs against.
func DistDir() string { return javatest.DistDir() }

// Build compiles the peer once per test binary (or finds it cached) and returns it;
// it skips t when java/javac or the distribution is missing.
func Build(t testing.TB) javatest.Program {
	t.Helper()
	p, err := javatest.Compile(sourceDir())
	if errors.Is(err, javatest.ErrUnavailable) {
		t.Skip("javapeer: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Produce runs the peer's producer and returns each message sent, in send order.
func Produce(t testing.TB, s Spec) ([]Message, Summary) {
	t.Helper()
	s.Op = "produce"
	return run(t, s)
}

// Consume runs the peer's consumer and returns each message received, in receive order.
func Consume(t testing.TB, s Spec) ([]Message, Summary) {
	t.Helper()
	s.Op = "consume"
	return run(t, s)
}

func run(t testing.TB, s Spec) ([]Message, Summary) {
	t.Helper()
	msgs, sum, err := exec1(Build(t), s)
	if err != nil {
		t.Fatal(err)
	}
	return msgs, sum
}

func exec1(p javatest.Program, s Spec) ([]Message, Summary, error) {
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, Summary{}, err
	}
	cmd := exec.Command(p.Java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", p.Classpath, "Peer")
	cmd.Stdin = bytes.NewReader(spec)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, Summary{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, Summary{}, err
	}
	var msgs []Message
	var sum Summary
	done := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var probe struct {
			Done                                  bool
			Sent, Failed, Received, Acked, Nacked int
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, sum, fmt.Errorf("javapeer: %q: %v", line, err)
		}
		if probe.Done {
			done = true
			sum = Summary{Sent: probe.Sent, Failed: probe.Failed, Received: probe.Received, Acked: probe.Acked, Nacked: probe.Nacked}
			continue
		}
		var m Message
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, sum, fmt.Errorf("javapeer: %q: %v", line, err)
		}
		msgs = append(msgs, m)
	}
	werr := cmd.Wait()
	sum.Stderr = tailLines(stderr.String(), 40)
	if werr != nil || !done {
		return msgs, sum, fmt.Errorf("javapeer %s %s: %v after %s (summary: %v); stderr:\n%s", s.Op, s.Topic, werr, time.Since(start).Round(time.Millisecond), done, sum.Stderr)
	}
	return msgs, sum, nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Typed is one message TypedConsumer read with AUTO_CONSUME: its schema type and its
// value decoded by the Java client, as JSON (protobuf as protojson with the proto's field
// names).
type Typed struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
	Error string          `json:"error"`
}

// AutoConsume reads up to count messages of topic from its start (a new subscription)
// with the Java client's AUTO_CONSUME schema, stopping after timeout without a message.
func AutoConsume(t testing.TB, url, topic string, count int, timeout time.Duration) []Typed {
	t.Helper()
	prog := Build(t)
	cmd := exec.Command(prog.Java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", prog.Classpath, "TypedConsumer",
		url, topic, fmt.Sprint(count), fmt.Sprint(timeout.Milliseconds()), fmt.Sprintf("typed-%d", time.Now().UnixNano()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("javapeer TypedConsumer %s: %v; stderr:\n%s", topic, err, tailLines(stderr.String(), 40))
	}
	var msgs []Typed
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var probe struct{ Done bool }
		if err := json.Unmarshal(line, &probe); err != nil {
			t.Fatalf("javapeer TypedConsumer: %q: %v", line, err)
		}
		if probe.Done {
			return msgs
		}
		var m Typed
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("javapeer TypedConsumer: %q: %v", line, err)
		}
		msgs = append(msgs, m)
	}
	t.Fatalf("javapeer TypedConsumer %s ended without its summary; stderr:\n%s", topic, tailLines(stderr.String(), 40))
	return nil
}
