// Package javapeer runs Apache Pulsar's reference Java client (Peer.java, compiled against
// the fetched Pulsar distribution's jars) as a peer of the bridge in e2e tests: it
// produces and consumes by a JSON spec and reports every message as a JSON line.
//
// The classes are compiled once per test binary into a cache directory named after the
// source's SHA-256 (next to the distribution, like the broker's), so later runs reuse them.
// Without java/javac or the distribution the tests that need the peer are skipped.
package javapeer

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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
	Action          string            `json:"action"` // consume: ack, nack or none
	Error           string            `json:"error"`  // produce: the send failed
}

// Summary is the peer's last line.
type Summary struct {
	Sent, Failed            int
	Received, Acked, Nacked int
	Stderr                  string // the client's log (its tail)
}

var (
	buildOnce sync.Once
	classpath string
	javaBin   string
	skipWhy   string
	buildErr  error
)

func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// DistDir is the fetched Pulsar distribution e2e/pulsar/pulsar.sh unpacks: PULSAR_CACHE_DIR
// (default ~/.cache/recordio-bridge) / apache-pulsar-PULSAR_VERSION (default 4.0.8).
func DistDir() string {
	cache := os.Getenv("PULSAR_CACHE_DIR")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "recordio-bridge")
	}
	v := os.Getenv("PULSAR_VERSION")
	if v == "" {
		v = "4.0.8"
	}
	return filepath.Join(cache, "apache-pulsar-"+v)
}

// findJDK returns javac and java of one JDK: JAVA_HOME's, PATH's, or one under /usr/lib/jvm.
func findJDK() (javac, java string) {
	var homes []string
	if h := os.Getenv("JAVA_HOME"); h != "" {
		homes = append(homes, h)
	}
	if p, err := exec.LookPath("javac"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			homes = append(homes, filepath.Dir(filepath.Dir(r)))
		}
	}
	more, _ := filepath.Glob("/usr/lib/jvm/*")
	homes = append(homes, more...)
	for _, h := range homes {
		c, j := filepath.Join(h, "bin", "javac"), filepath.Join(h, "bin", "java")
		if isExec(c) && isExec(j) {
			return c, j
		}
	}
	return "", ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Build compiles the peer once per test binary (or finds it cached) and returns its
// classpath; it skips t when java/javac or the distribution is missing.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(build)
	if skipWhy != "" {
		t.Skip("javapeer: " + skipWhy)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return classpath
}

func build() {
	dist := DistDir()
	if _, err := os.Stat(filepath.Join(dist, "lib")); err != nil {
		skipWhy = fmt.Sprintf("no Pulsar distribution at %s (run e2e/pulsar/pulsar.sh fetch)", dist)
		return
	}
	javac, java := findJDK()
	if javac == "" {
		skipWhy = "no JDK (javac and java) in JAVA_HOME, on PATH or under /usr/lib/jvm (apt-get install openjdk-17-jdk-headless)"
		return
	}
	javaBin = java
	src, err := filepath.Glob(filepath.Join(sourceDir(), "*.java"))
	if err != nil || len(src) == 0 {
		buildErr = fmt.Errorf("javapeer: no Java sources in %s", sourceDir())
		return
	}
	h := sha256.New()
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			buildErr = err
			return
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "dist %s\n", dist)
	classes := filepath.Join(filepath.Dir(dist), "javapeer-"+hex.EncodeToString(h.Sum(nil))[:16])
	libs := filepath.Join(dist, "lib", "*")
	classpath = classes + string(os.PathListSeparator) + libs
	if _, err := os.Stat(filepath.Join(classes, "Peer.class")); err == nil {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dist), "javapeer-build-")
	if err != nil {
		buildErr = err
		return
	}
	defer os.RemoveAll(tmp)
	args := append([]string{"-d", tmp, "-cp", libs, "--release", "17", "-nowarn"}, src...)
	if out, err := exec.Command(javac, args...).CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("javapeer: javac: %v\n%s", err, out)
		return
	}
	if err := os.Rename(tmp, classes); err != nil && !isDir(filepath.Join(classes)) {
		buildErr = err
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
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
	cp := Build(t)
	msgs, sum, err := exec1(cp, s)
	if err != nil {
		t.Fatal(err)
	}
	return msgs, sum
}

func exec1(cp string, s Spec) ([]Message, Summary, error) {
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, Summary{}, err
	}
	cmd := exec.Command(javaBin, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "Peer")
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
