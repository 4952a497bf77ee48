package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
	"github.com/recordio-bridge/bridge/recordio"
)

// The conformance matrix between the bridge and Pulsar's reference Java client
// (javapeer): every row sends messages one way (Java producer -> bridge egress, or bridge
// ingress -> Java consumer), hashes every payload on both sides and counts what was
// sent, received, lost, duplicated and received different (bytes, key, properties, event
// time, partition). `make e2e` runs one row of each kind; INTEROP_FULL=1 (make interop)
// runs them all; INTEROP_TABLE names a file the Markdown table is written to.
//
// It lives in package e2e, not a package of its own, because it drives the bridge binary
// with the same helpers as the rest of the suite (startBridge, openStream, egressGet,
// postAck, the broker's admin calls), which other work keeps changing in place.

var (
	interopFull   = os.Getenv("INTEROP_FULL") != ""
	interopMu     sync.Mutex
	interopRows   []interopRow
	interopTableF = os.Getenv("INTEROP_TABLE")
)

// interopRow is one line of the matrix.
type interopRow struct {
	Row, Direction                      string
	Sent, Received, Lost, Dup, Mismatch int
	Verdict, Note                       string
}

func addInteropRow(r interopRow) {
	interopMu.Lock()
	interopRows = append(interopRows, r)
	interopMu.Unlock()
	if interopTableF != "" {
		_ = os.WriteFile(interopTableF, []byte(interopTable()), 0o644)
	}
}

func interopTable() string {
	interopMu.Lock()
	defer interopMu.Unlock()
	var b strings.Builder
	b.WriteString("| row | direction | sent | received | lost | dup | mismatch | verdict | note |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range interopRows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %s | %s |\n", r.Row, r.Direction, r.Sent, r.Received, r.Lost, r.Dup, r.Mismatch, r.Verdict,
			strings.ReplaceAll(r.Note, "|", "/"))
	}
	return b.String()
}

// row starts a matrix row for the running subtest; the row is recorded when the subtest
// ends, failed when the subtest failed (also by t.Fatal before it was filled in).
func row(t *testing.T, dir string) *interopRow {
	r := &interopRow{Row: t.Name()[strings.Index(t.Name(), "/")+1:], Direction: dir}
	t.Cleanup(func() {
		if r.Verdict == "" {
			r.Verdict = "pass"
			if t.Failed() {
				r.Verdict = "FAIL"
			}
		}
		if t.Failed() && !strings.HasPrefix(r.Verdict, "FAIL") {
			r.Verdict = "FAIL: " + r.Verdict
		}
		addInteropRow(*r)
	})
	return r
}

// tallyHashes fills lost, dup and mismatch from the sent and received payload hashes
// (mismatch: received, never sent).
func (r *interopRow) tallyHashes(sent, got []string) {
	want := map[string]int{}
	for _, h := range sent {
		want[h]++
	}
	seen := map[string]int{}
	for _, h := range got {
		seen[h]++
	}
	r.Sent, r.Received = len(sent), len(got)
	for h, n := range want {
		if seen[h] < n {
			r.Lost += n - seen[h]
		} else if seen[h] > n {
			r.Dup += seen[h] - n
		}
	}
	for h, n := range seen {
		if want[h] == 0 {
			r.Mismatch += n
		}
	}
}

// check fails t unless nothing was lost, duplicated or different.
func (r *interopRow) check(t *testing.T) {
	t.Helper()
	if r.Lost != 0 || r.Dup != 0 || r.Mismatch != 0 {
		t.Errorf("%s: sent %d, received %d: lost %d, duplicated %d, mismatched %d (%s)", r.Row, r.Sent, r.Received, r.Lost, r.Dup, r.Mismatch, r.Note)
	}
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// egressRecord is one record of an egress stream with envelope=json (raw: the record).
type egressRecord struct {
	MessageID       string            `json:"messageId"`
	Topic           string            `json:"topic"`
	Key             string            `json:"key"`
	OrderingKey     string            `json:"orderingKey"`
	Properties      map[string]string `json:"properties"`
	EventTime       string            `json:"eventTime"`
	RedeliveryCount int               `json:"redeliveryCount"`
	Payload         json.RawMessage   `json:"payload"`
	PayloadBase64   string            `json:"payloadBase64"`
	raw             []byte
}

// bytes is the message's payload.
func (e *egressRecord) bytes() []byte {
	if e.MessageID == "" {
		return e.raw
	}
	if e.PayloadBase64 != "" {
		b, _ := base64.StdEncoding.DecodeString(e.PayloadBase64)
		return b
	}
	return e.Payload
}

// egressReader reads one GET of an egress stream in the background.
type egressReader struct {
	resp   *http.Response
	sid    string
	recs   chan []byte
	cancel context.CancelFunc
}

func openEgressReader(t testing.TB, url string, envelopeJSON bool) *egressReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := map[string]string{}
	if envelopeJSON {
		h["Message-Accept"] = "application/json"
	}
	resp := egressGet(t, ctx, url, h)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	r := &egressReader{resp: resp, sid: resp.Header.Get("Stream-Id"), recs: make(chan []byte, 1024), cancel: cancel}
	go func() {
		defer close(r.recs)
		rd := recordio.NewReader(resp.Body)
		for {
			rec, err := rd.Next()
			if err != nil {
				return
			}
			r.recs <- bytes.Clone(rec)
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *egressReader) close() {
	r.cancel()
	r.resp.Body.Close()
	for range r.recs {
	}
}

// next returns the next record, or false after idle without one (or at the end).
func (r *egressReader) next(t testing.TB, idle time.Duration, envelopeJSON bool) (*egressRecord, bool) {
	t.Helper()
	select {
	case rec, ok := <-r.recs:
		if !ok {
			return nil, false
		}
		e := &egressRecord{raw: rec}
		if envelopeJSON {
			if err := json.Unmarshal(rec, e); err != nil {
				t.Fatalf("egress record %.200q: %v", rec, err)
			}
		}
		return e, true
	case <-time.After(idle):
		return nil, false
	}
}

// readAll reads until want records came and then linger passed without another (so a
// duplicate right behind is seen), or until idle passes without a record.
func (r *egressReader) readAll(t testing.TB, want int, idle, linger time.Duration, envelopeJSON bool) []*egressRecord {
	t.Helper()
	var out []*egressRecord
	for {
		wait := idle
		if len(out) >= want {
			wait = linger
		}
		e, ok := r.next(t, wait, envelopeJSON)
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

// egressBridge starts a bridge with one egress stream "out" on topic (extra: more keys of
// the stream, indented as stream keys) and pulsar/top-level YAML (top).
func egressBridge(t *testing.T, b *broker.Broker, topic, extra, top string) *bridgeProc {
	t.Helper()
	return startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
%s
streams:
  - name: out
    topics: [%s]
    position: earliest
%s
`, b.URL, top, topic, extra))
}

func sentHashes(ms []javapeer.Message) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.SHA256)
	}
	return out
}

func mustProduce(t *testing.T, s javapeer.Spec) []javapeer.Message {
	t.Helper()
	ms, sum := javapeer.Produce(t, s)
	if sum.Failed > 0 || len(ms) != s.Count {
		var errs []string
		for _, m := range ms {
			if m.Error != "" {
				errs = append(errs, m.Error)
			}
		}
		t.Fatalf("the Java producer sent %d of %d (%d failed: %.300s); its log:\n%s", sum.Sent, s.Count, sum.Failed, strings.Join(errs, "; "), sum.Stderr)
	}
	return ms
}

// javaToEgress: the Java producer publishes spec; the bridge's egress (envelope json
// unless raw) reads them; payloads compared by hash, and keys, properties and event time
// compared to what was sent.
func javaToEgress(t *testing.T, r *interopRow, spec javapeer.Spec, raw bool) {
	b := broker.Get(t)
	if spec.Topic == "" {
		spec.Topic = b.Topic(t, "interop")
	}
	spec.URL = b.URL
	sent := mustProduce(t, spec)
	extra := "    envelope: json"
	if raw {
		extra = "    envelope: none\n    contentType: application/octet-stream"
	}
	p := egressBridge(t, b, spec.Topic, extra, "ingress:\n  maxRecordBytes: 32MiB\n")
	rd := openEgressReader(t, p.DataURL+"/v1/streams/out", !raw)
	recs := rd.readAll(t, len(sent), 15*time.Second, time.Second, !raw)
	bySHA := map[string]javapeer.Message{}
	for _, m := range sent {
		bySHA[m.SHA256] = m
	}
	var got []string
	attr := 0
	var notes []string
	for _, e := range recs {
		h := hashOf(e.bytes())
		got = append(got, h)
		m, ok := bySHA[h]
		if !ok || raw {
			continue
		}
		if bad := attrDiff(m, e, spec); bad != "" {
			attr++
			if len(notes) < 3 {
				notes = append(notes, bad)
			}
		}
	}
	r.tallyHashes(sentHashes(sent), got)
	r.Mismatch += attr
	if len(notes) > 0 {
		r.Note = strings.Join(notes, "; ")
	}
	if r.Lost > 0 {
		r.Note = strings.TrimPrefix(r.Note+"; bridge: "+firstWarning(p), "; ")
	}
	r.check(t)
}

// firstWarning is the bridge's first logged warning or error (its message and error), for
// a row's note.
func firstWarning(p *bridgeProc) string {
	for _, l := range strings.Split(p.logs.String(), "\n") {
		var e struct{ Level, Msg, Error string }
		if json.Unmarshal([]byte(l), &e) == nil && (e.Level == "WARN" || e.Level == "ERROR") {
			return fmt.Sprintf("%s: %.160s", e.Msg, e.Error)
		}
	}
	return "no warning logged"
}

// attrDiff says how an egress record's key, ordering key, properties and event time
// differ from the message the Java producer sent ("" when they agree).
func attrDiff(m javapeer.Message, e *egressRecord, spec javapeer.Spec) string {
	var d []string
	if e.Key != m.Key {
		d = append(d, fmt.Sprintf("key %q, sent %q", e.Key, m.Key))
	}
	if spec.OrderingKeys && e.OrderingKey != m.OrderingKey {
		d = append(d, fmt.Sprintf("orderingKey %q, sent %q", e.OrderingKey, m.OrderingKey))
	}
	if spec.Properties && (e.Properties["i"] != strconv.Itoa(m.I) || e.Properties["p"] != "peer") {
		d = append(d, fmt.Sprintf("properties %v", e.Properties))
	}
	if spec.EventTime > 0 {
		et, err := time.Parse(time.RFC3339Nano, e.EventTime)
		if err != nil || et.UnixMilli() != spec.EventTime+int64(m.I) {
			d = append(d, fmt.Sprintf("eventTime %q, sent %d ms", e.EventTime, spec.EventTime+int64(m.I)))
		}
	}
	return strings.Join(d, ", ")
}

// ingressRecord is record i of an ingress row: JSON naming its key and sequence, padded to size.
func ingressRecord(seed, i, size int, key string) []byte {
	head := fmt.Sprintf(`{"key":%q,"seq":%d,"seed":%d,"pad":"`, key, i, seed)
	n := max(size-len(head)-2, 0)
	pad := make([]byte, n)
	x := uint32(seed*7919 + i*104729 + 1)
	for j := range pad {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		pad[j] = "abcdefgh"[x%8]
	}
	return []byte(head + string(pad) + `"}`)
}

// ingressBridge starts a bridge with one route "in" to topic, the key and a "seq"
// property from each record's JSON; top adds YAML (pulsar.compression, ingress limits).
func ingressBridge(t *testing.T, b *broker.Broker, topic, pulsarExtra, top string) *bridgeProc {
	t.Helper()
	return startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
%s
%s
routes:
  - name: in
    default:
      topic: %s
      key: "{json:key}"
      properties: {seq: "{json:seq}"}
`, b.URL, pulsarExtra, top, topic))
}

// publishIngress POSTs records on one stream: all at once (batches form), or one at a
// time, each waiting for its receipt (every message alone); it returns the receipts.
func publishIngress(t *testing.T, p *bridgeProc, recs [][]byte, oneByOne bool) []receipt {
	t.Helper()
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/in", nil)
	var out []receipt
	if oneByOne {
		for i, r := range recs {
			if err := st.send(r); err != nil {
				t.Fatal(err)
			}
			select {
			case rc, ok := <-st.receipts:
				if !ok {
					t.Fatalf("record %d: the response ended", i)
				}
				out = append(out, rc)
			case <-time.After(60 * time.Second):
				t.Fatalf("record %d: no receipt within 60s", i)
			}
		}
	} else if err := st.send(recs...); err != nil {
		t.Fatal(err)
	}
	more, sum, err := st.finish(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, more...)
	if sum.Published != int64(len(recs)) {
		t.Fatalf("ingress published %d of %d: %+v", sum.Published, len(recs), out[:min(len(out), 3)])
	}
	return out
}

// ingressToJava: records POSTed to the bridge are read by the Java consumer; payloads by
// hash, keys and the seq property compared.
func ingressToJava(t *testing.T, r *interopRow, recs [][]byte, keys []string, pulsarExtra, top string, oneByOne bool) []javapeer.Message {
	b := broker.Get(t)
	topic := b.Topic(t, "interop")
	p := ingressBridge(t, b, topic, pulsarExtra, top)
	publishIngress(t, p, recs, oneByOne)
	got, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: topic, Subscription: "check", Count: len(recs), TimeoutMs: 20000})
	var sent, hs []string
	bySHA := map[string]int{}
	for i, rec := range recs {
		h := hashOf(rec)
		sent = append(sent, h)
		bySHA[h] = i
	}
	attr := 0
	batched := 0
	for _, m := range got {
		hs = append(hs, m.SHA256)
		if m.ID.BatchSize > 1 {
			batched++
		}
		i, ok := bySHA[m.SHA256]
		if !ok {
			continue
		}
		if m.Key != keys[i] || m.Properties["seq"] != strconv.Itoa(i) {
			attr++
			if r.Note == "" {
				r.Note = fmt.Sprintf("message %d: key %q (sent %q), properties %v", i, m.Key, keys[i], m.Properties)
			}
		}
	}
	r.tallyHashes(sent, hs)
	r.Mismatch += attr
	if r.Note == "" {
		r.Note = fmt.Sprintf("%d of %d received in batches", batched, len(got))
	}
	r.check(t)
	return got
}

func ingressRecords(n int, sizes []int, keys int) ([][]byte, []string) {
	recs := make([][]byte, n)
	ks := make([]string, n)
	for i := range n {
		ks[i] = fmt.Sprintf("k%d", i%keys)
		recs[i] = ingressRecord(1, i, sizes[i%len(sizes)], ks[i])
	}
	return recs, ks
}

var interopCompressions = []string{"NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"}

// TestInteropWithTheJavaClient is the conformance matrix (see the top of this file).
func TestInteropWithTheJavaClient(t *testing.T) {
	javapeer.Build(t)
	broker.Get(t)
	t.Cleanup(func() {
		if len(interopRows) > 0 {
			t.Logf("interop matrix:\n%s", interopTable())
			fmt.Println("\n" + interopTable())
		}
	})
	n := 50
	if interopFull {
		n = 200
	}
	sizes := []int{10, 100, 1000, 10000}

	// Compression x batching, both directions.
	for _, c := range interopCompressions {
		for _, batching := range []bool{true, false} {
			mode := "batched"
			if !batching {
				mode = "unbatched"
			}
			short := (c == "LZ4" && batching)
			t.Run("compression-"+c+"-"+mode+"/java-to-egress", func(t *testing.T) {
				if !interopFull && !short {
					t.Skip("INTEROP_FULL=1 runs this row")
				}
				r := row(t, "Java producer -> egress")
				javaToEgress(t, r, javapeer.Spec{Count: n, Sizes: sizes, Compression: c, NoBatching: !batching, Keys: 4, Properties: true, BatchDelayMs: 20}, false)
			})
			short = (c == "ZSTD" && batching)
			t.Run("compression-"+c+"-"+mode+"/ingress-to-java", func(t *testing.T) {
				if !interopFull && !short {
					t.Skip("INTEROP_FULL=1 runs this row")
				}
				r := row(t, "ingress -> Java consumer")
				recs, keys := ingressRecords(n, sizes, 4)
				got := ingressToJava(t, r, recs, keys, "  compression: "+strings.ToLower(c), "", !batching)
				if batching {
					b := 0
					for _, m := range got {
						if m.ID.BatchSize > 1 {
							b++
						}
					}
					if b == 0 {
						t.Errorf("no message came in a batch: the row did not test batches")
					}
				}
			})
		}
	}
}
