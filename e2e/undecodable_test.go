package e2e

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// javaProduceEncrypted publishes msg to topic with the Java client's tool, encrypted
// with the RSA public key in pubPEM under the name keyName (not batched).
func javaProduceEncrypted(t testing.TB, b *broker.Broker, topic, keyName, pubPEM, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pulsarDistBin(t, "pulsar-client"), "--url", b.URL,
		"produce", topic, "-m", msg, "-db", "-ekn", keyName, "-ekv", "file://"+pubPEM)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pulsar-client produce: %v\n%s", err, out)
	}
}

// rsaKeyPair makes an RSA key pair with openssl in dir: the private key and the path of
// the public key's PEM file.
func rsaKeyPair(t testing.TB, dir string) (*rsa.PrivateKey, string) {
	t.Helper()
	priv, pub := filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	for _, args := range [][]string{{"genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", priv},
		{"pkey", "-in", priv, "-pubout", "-out", pub}} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	raw, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	if blk == nil {
		t.Fatalf("%s holds no PEM block", priv)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey), pub
}

func publishPlain(t testing.TB, b *broker.Broker, topic, payload string) {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
}

// readStream reads a stream's records until it ends or n records came, and returns
// them with the response (whose Trailer is read once the body ended).
func readStream(t testing.TB, url string, n int) ([][]byte, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	resp := egressGet(t, ctx, url, nil)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	rd := recordio.NewReader(resp.Body)
	var recs [][]byte
	for len(recs) < n {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d records: %v", len(recs), err)
		}
		recs = append(recs, append([]byte(nil), rec...))
	}
	return recs, resp
}

func waitBacklog(t testing.TB, b *broker.Broker, topic, sub string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := subscriptionBacklog(t, b, topic, sub)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backlog of %s on %s is %d, want %d", sub, topic, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func scrapeMetrics(t testing.TB, opsURL string) string {
	t.Helper()
	resp, err := http.Get(opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestEgressCryptoFailureModesOnAJavaEncryptedMessage: a message the Java client
// encrypted (pulsar-client produce -ekv), then a plain one, read through three streams
// of the bridge, one per cryptoFailure. fail: the stream ends with a Stream-Error naming
// the message and its topic, and nothing is acknowledged; discard: the plain message is
// delivered and both are acknowledged, the encrypted one counted; deliver: the encrypted
// message is written as stored, its envelope carrying what decrypting it takes, which
// this test does with the private key, getting the plaintext back.
func TestEgressCryptoFailureModesOnAJavaEncryptedMessage(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "encrypted")
	priv, pub := rsaKeyPair(t, t.TempDir())
	const secret = "the plaintext only the key holder reads"
	javaProduceEncrypted(t, b, topic, "bridge-test", pub, secret)
	publishPlain(t, b, topic, "plain")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - {name: fail, topics: [%[2]s], position: earliest}
  - {name: discard, topics: [%[2]s], position: earliest, cryptoFailure: discard}
  - {name: deliver, topics: [%[2]s], position: earliest, cryptoFailure: deliver, envelope: json}
`, b.URL, topic))

	recs, resp := readStream(t, p.DataURL+"/v1/streams/fail", 10)
	if len(recs) != 0 {
		t.Fatalf("cryptoFailure fail wrote %q", recs)
	}
	streamErr := resp.Trailer.Get("Stream-Error")
	if !strings.Contains(streamErr, topic) || !strings.Contains(streamErr, "encrypted") || !strings.Contains(streamErr, ":0:-1") {
		t.Fatalf("Stream-Error %q names neither the encrypted message nor its topic", streamErr)
	}
	waitBacklog(t, b, topic, "bridge-fail", 2) // neither acknowledged

	recs, _ = readStream(t, p.DataURL+"/v1/streams/discard", 1)
	if len(recs) != 1 || string(recs[0]) != "plain" {
		t.Fatalf("cryptoFailure discard wrote %q", recs)
	}
	waitBacklog(t, b, topic, "bridge-discard", 0)
	if v := metricValue(t, scrapeMetrics(t, p.OpsURL), `bridge_egress_undecodable_total{reason="encrypted"}`); v < 2 {
		t.Fatalf("bridge_egress_undecodable_total{reason=\"encrypted\"} = %v, want one per stream that saw it (2 so far)", v)
	}

	recs, _ = readStream(t, p.DataURL+"/v1/streams/deliver", 2)
	if len(recs) != 2 {
		t.Fatalf("cryptoFailure deliver wrote %q", recs)
	}
	var env struct {
		Encrypted  bool
		Encryption struct {
			Keys []struct {
				Name  string
				Value []byte
			}
			Algorithm   string
			Param       []byte
			Compression string
		}
		PayloadBase64 string
	}
	if err := json.Unmarshal(recs[0], &env); err != nil {
		t.Fatal(err)
	}
	if !env.Encrypted || len(env.Encryption.Keys) != 1 || env.Encryption.Keys[0].Name != "bridge-test" || env.Encryption.Compression != "NONE" {
		t.Fatalf("the encrypted message's envelope: %s", recs[0])
	}
	stored, _ := base64.StdEncoding.DecodeString(env.PayloadBase64)
	if strings.Contains(string(stored), secret) {
		t.Fatalf("the payload was written decrypted: %q", stored)
	}
	// What the Java client does with its private key: RSA-OAEP (SHA-1) unwraps the data
	// key, AES-GCM with the parameter as its nonce opens the payload.
	dataKey, err := rsa.DecryptOAEP(sha1.New(), nil, priv, env.Encryption.Keys[0].Value, nil)
	if err != nil {
		t.Fatalf("unwrapping the data key: %v", err)
	}
	blk, err := aes.NewCipher(dataKey)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCMWithNonceSize(blk, len(env.Encryption.Param))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := gcm.Open(nil, env.Encryption.Param, stored, nil)
	if err != nil || string(plain) != secret {
		t.Fatalf("decrypting what the bridge delivered: %q, %v", plain, err)
	}
	var second struct{ Encrypted bool }
	if err := json.Unmarshal(recs[1], &second); err != nil || second.Encrypted {
		t.Fatalf("the plain message's envelope: %s", recs[1])
	}
}

// zlibGarbageMetadata is a MessageMetadata (producer_name 1, sequence_id 2,
// publish_time 3, properties 4, partition_key 6, compression 8 = ZLIB,
// uncompressed_size 9) over a payload that is not zlib.
func zlibGarbageMetadata() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "raw")
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(time.Now().UnixMilli()))
	var kv []byte
	kv = protowire.AppendTag(kv, 1, protowire.BytesType)
	kv = protowire.AppendString(kv, "origin")
	kv = protowire.AppendTag(kv, 2, protowire.BytesType)
	kv = protowire.AppendString(kv, "raw-sender")
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, kv)
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendString(b, "the-key")
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	b = protowire.AppendTag(b, 9, protowire.VarintType)
	return protowire.AppendVarint(b, 100)
}

// TestEgressDeadLettersAnUndecodableEntryUnchanged: an entry whose metadata says ZLIB
// over bytes that are not (sent raw through the real broker), then a plain message. The
// stream writes only the plain one; the entry is on the dead-letter topic with its
// payload byte for byte and its properties and key as stored, plus why and how it was
// stored, and the Java client's REAL_TOPIC and ORIGIN_MESSAGE_ID; both are
// acknowledged, and the entry is counted by reason on /metrics.
func TestEgressDeadLettersAnUndecodableEntryUnchanged(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "undecodable")
	dlqTopic := topic + "-dead"
	oc := newOfficialClient(t, b)
	dlq, err := oc.Subscribe(official.ConsumerOptions{Topic: dlqTopic, SubscriptionName: "check",
		SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	garbage := []byte("\x78\x9c these bytes are not a zlib stream")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	metadata := zlibGarbageMetadata()
	if err := pulsartest.Publish(ctx, b.URL, topic, metadata, garbage); err != nil {
		t.Fatal(err)
	}
	publishPlain(t, b, topic, "plain")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - {name: out, topics: [%s], position: earliest, retry: {deadLetterTopic: %s}}
`, b.URL, topic, dlqTopic))
	recs, _ := readStream(t, p.DataURL+"/v1/streams/out", 1)
	if len(recs) != 1 || string(recs[0]) != "plain" {
		t.Fatalf("written %q", recs)
	}
	m, err := dlq.Receive(ctx)
	if err != nil {
		t.Fatalf("nothing on the dead-letter topic: %v", err)
	}
	if string(m.Payload()) != string(garbage) {
		t.Fatalf("dead-lettered %q, want the entry's payload %q", m.Payload(), garbage)
	}
	props := m.Properties()
	want := map[string]string{"origin": "raw-sender", "UNDECODABLE_REASON": "decompression_error", "REAL_TOPIC": topic,
		"ORIGIN_COMPRESSION": "ZLIB", "ORIGIN_UNCOMPRESSED_SIZE": "100"}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("property %s = %q, want %q (all: %v)", k, props[k], v, props)
		}
	}
	if id := props["ORIGIN_MESSAGE_ID"]; !strings.HasSuffix(id, ":0:-1") {
		t.Errorf("ORIGIN_MESSAGE_ID %q: want ledger:0:-1", id)
	}
	if md, err := base64.StdEncoding.DecodeString(props["ORIGIN_METADATA"]); err != nil || string(md) != string(metadata) {
		t.Errorf("ORIGIN_METADATA %q: %v", props["ORIGIN_METADATA"], err)
	}
	if m.Key() != "the-key" {
		t.Errorf("key %q, want the entry's", m.Key())
	}
	waitBacklog(t, b, topic, "bridge-out", 0)
	if v := metricValue(t, scrapeMetrics(t, p.OpsURL), `bridge_egress_undecodable_total{reason="decompression_error"}`); v != 1 {
		t.Fatalf("bridge_egress_undecodable_total{reason=\"decompression_error\"} = %v, want 1", v)
	}
}
