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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// wholeBatches: the row ran on a broker without batch-index acknowledgements
	// (Pulsar's default), which redelivers whole batches: its duplicates are acknowledged
	// batch-mates sent again by the broker, counted and noted, not failed. Loss still fails.
	wholeBatches bool
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

// batchMates marks a row about acknowledgements inside batches: on a broker without
// batch-index acknowledgements its duplicates are the broker's whole-batch redelivery.
func (r *interopRow) batchMates(t *testing.T, b *broker.Broker) {
	t.Helper()
	r.wholeBatches = !b.BatchIndexAcks(t)
}

// ackedAgain moves the received messages that had been acknowledged (acked, by hash) from
// the mismatches a tally against the unacknowledged ones counted to the duplicates: on a
// broker that redelivers whole batches they are acknowledged batch-mates sent again.
func (r *interopRow) ackedAgain(acked, got []string) {
	if !r.wholeBatches {
		return
	}
	was := map[string]bool{}
	for _, h := range acked {
		was[h] = true
	}
	for _, h := range got {
		if was[h] {
			r.Mismatch--
			r.Dup++
		}
	}
}

// check fails t unless nothing was lost, duplicated or different; on a broker that
// redelivers whole batches (see batchMates) duplicates are noted, not failed.
func (r *interopRow) check(t *testing.T) {
	t.Helper()
	dup := r.Dup
	if r.wholeBatches {
		r.Note += fmt.Sprintf("; broker without batch-index acks: %d duplicates (acknowledged batch-mates redelivered with their batch)", r.Dup)
		dup = 0
	}
	if r.Lost != 0 || dup != 0 || r.Mismatch != 0 {
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
	Encrypted       bool              `json:"encrypted"`
	Encryption      *struct {
		BatchSize int `json:"batchSize"`
	} `json:"encryption"`
	raw []byte
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
	err    atomic.Value // the read's error (string), when it ended on one
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
		rd := recordio.NewReader(resp.Body, recordio.MaxRecordSize(64<<20)) // chunked rows' messages reach 15 MiB
		for {
			rec, err := rd.Next()
			if err != nil {
				if err != io.EOF {
					r.err.Store(err.Error())
				}
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
	return mustProduceRow(t, nil, s)
}

// mustProduceRow is mustProduce noting a failure in r (when given).
func mustProduceRow(t *testing.T, r *interopRow, s javapeer.Spec) []javapeer.Message {
	t.Helper()
	ms, sum := javapeer.Produce(t, s)
	if sum.Failed > 0 || len(ms) != s.Count {
		var errs []string
		for _, m := range ms {
			if m.Error != "" {
				errs = append(errs, m.Error)
			}
		}
		if r != nil && len(errs) > 0 {
			r.Sent, r.Note = s.Count, fmt.Sprintf("the Java producer failed %d of %d sends: %.200s", sum.Failed, s.Count, errs[0])
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
	sent := mustProduceRow(t, r, spec)
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
	entries := map[[2]int64]int{}
	for _, m := range sent {
		entries[[2]int64{m.ID.Ledger, m.ID.Entry}]++
	}
	batched := 0
	for _, m := range sent {
		if entries[[2]int64{m.ID.Ledger, m.ID.Entry}] > 1 {
			batched++
		}
	}
	notes = append([]string{fmt.Sprintf("%d of %d sent in batches (%d entries)", batched, len(sent), len(entries))}, notes...)
	r.Note = strings.Join(notes, "; ")
	if !spec.NoBatching && !spec.Chunking && spec.Schema == "" && batched == 0 {
		t.Errorf("the Java producer sent no batch: the row did not test batches")
	}
	if r.Lost > 0 {
		if err, _ := rd.err.Load().(string); err != "" {
			r.Note = strings.TrimPrefix(r.Note+"; reading the response: "+err, "; ")
		}
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
	if ok, _ := base64.StdEncoding.DecodeString(e.OrderingKey); spec.OrderingKeys && string(ok) != m.OrderingKey {
		d = append(d, fmt.Sprintf("orderingKey %q (base64), sent %q", e.OrderingKey, m.OrderingKey))
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
	return ingressToJavaRouted(t, r, recs, keys, pulsarExtra, top, oneByOne, true)
}

// ingressToJavaRouted is ingressToJava; routed false expects no key and no JSON-derived
// property (a record above ingress.bufferRecordBytes is streamed, unrouted by its JSON).
func ingressToJavaRouted(t *testing.T, r *interopRow, recs [][]byte, keys []string, pulsarExtra, top string, oneByOne, routed bool) []javapeer.Message {
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
		wantKey, wantSeq := keys[i], strconv.Itoa(i)
		if !routed {
			wantKey, wantSeq = "", ""
		}
		if m.Key != wantKey || m.Properties["seq"] != wantSeq {
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
	return ingressRecordsKeyed(n, sizes, keys, "k")
}

// ingressRecordsKeyed makes n records whose keys are prefix + (i % keys), as the Java
// peer's.
func ingressRecordsKeyed(n int, sizes []int, keys int, prefix string) ([][]byte, []string) {
	recs := make([][]byte, n)
	ks := make([]string, n)
	for i := range n {
		ks[i] = fmt.Sprintf("%s%d", prefix, i%keys)
		recs[i] = ingressRecord(1, i, sizes[i%len(sizes)], ks[i])
	}
	return recs, ks
}

var interopCompressions = []string{"NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"}

// batchedRecords is how many records a row posts at once when it needs the bridge's
// producer to batch them: far more than the 32 lone entries it keeps in flight while the
// broker keeps up.
const batchedRecords = 500

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
				m := n
				if batching {
					// The producer sends a record alone while the broker keeps up (up to 32
					// in flight): only records that come faster than it answers share
					// entries, so a batched row posts enough to outpace it.
					m = max(n, batchedRecords)
				}
				recs, keys := ingressRecords(m, sizes, 4)
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

	// Chunked messages both ways: 8 MiB and three times the broker's maxMessageSize (5 MiB).
	// The Java rows use 4 MiB chunks; the full form adds the Java default (the broker's
	// limit less the metadata), which needs the bookie's frame limit above maxMessageSize
	// (e2e/pulsar/standalone.conf's nettyMaxFrameSizeBytes).
	for _, size := range []int{8 << 20, 15 << 20} {
		short := size == 8<<20
		name := fmt.Sprintf("chunked-%dMiB", size>>20)
		for _, chunk := range []int{4 << 20, 0} {
			cname := "4MiB-chunks"
			if chunk == 0 {
				cname = "default-chunks"
			}
			t.Run(name+"/java-"+cname+"-to-egress", func(t *testing.T) {
				if !interopFull && !(short && chunk != 0) {
					t.Skip("INTEROP_FULL=1 runs this row")
				}
				r := row(t, "Java producer (enableChunking) -> egress")
				javaToEgress(t, r, javapeer.Spec{Count: 2, Size: size, Chunking: true, ChunkMaxBytes: chunk, NoBatching: true, SendTimeoutMs: 60000}, true)
			})
		}
		t.Run(name+"/ingress-streamed-to-java", func(t *testing.T) {
			if !interopFull && !short {
				t.Skip("INTEROP_FULL=1 runs this row")
			}
			r := row(t, "ingress (streamed, chunked) -> Java consumer")
			recs, keys := ingressRecords(2, []int{size}, 1)
			ingressToJavaRouted(t, r, recs, keys, "", "ingress:\n  maxRecordBytes: 32MiB\n", true, false)
		})
		t.Run(name+"/ingress-held-to-java", func(t *testing.T) {
			if !interopFull {
				t.Skip("INTEROP_FULL=1 runs this row")
			}
			r := row(t, "ingress (held, chunked) -> Java consumer")
			recs, keys := ingressRecords(2, []int{size}, 1)
			ingressToJava(t, r, recs, keys, "", "ingress:\n  maxRecordBytes: 32MiB\n  bufferRecordBytes: 32MiB\n", true)
		})
	}

	// Keys, ordering keys, properties and event time, Java -> egress.
	t.Run("attributes/java-to-egress", func(t *testing.T) {
		r := row(t, "Java producer -> egress")
		javaToEgress(t, r, javapeer.Spec{Count: 20, Size: 64, Keys: 5, OrderingKeys: true, Properties: true, EventTime: 1_700_000_000_000}, false)
	})

	// The same key lands on the same partition from either client, with either hashing
	// scheme: keys long enough for the hash to pass 2^31 and with characters outside
	// ASCII, where a hash of UTF-8 bytes or an unmasked one would disagree with Java's.
	for _, hs := range []struct{ java, bridge string }{{"JavaStringHash", ""}, {"Murmur3_32Hash", "murmur3"}} {
		t.Run("partitions-by-key/bridge-and-java-"+hs.java, func(t *testing.T) {
			if !interopFull && hs.bridge != "" {
				t.Skip("INTEROP_FULL=1 runs this row")
			}
			r := row(t, "ingress and Java producer -> Java consumer, 3 partitions, "+hs.java)
			interopPartitions(t, r, hs.java, hs.bridge)
		})
	}

	// Batch-index acknowledgement (PIP-54) across clients.
	t.Run("batch-index-ack/java-consumer-acks-part-of-a-bridge-batch", func(t *testing.T) {
		r := row(t, "ingress batch -> Java consumer (batch index ack)")
		interopJavaAcksPartOfABridgeBatch(t, r)
	})
	t.Run("batch-index-ack/egress-acks-part-of-a-java-batch", func(t *testing.T) {
		r := row(t, "Java batch -> egress (ack: client)")
		interopEgressAcksPartOfAJavaBatch(t, r)
	})

	// Negative acknowledgements and dead letters inside batches.
	t.Run("nack-dlq/java-consumer-nacks-inside-a-bridge-batch", func(t *testing.T) {
		r := row(t, "ingress batch -> Java consumer (nack, DLQ)")
		interopJavaNacksInsideABridgeBatch(t, r)
	})
	t.Run("nack-dlq/egress-nacks-inside-a-java-batch", func(t *testing.T) {
		r := row(t, "Java batch -> egress (nack, maxDeliveries) -> DLQ -> Java consumer")
		interopEgressNacksInsideAJavaBatch(t, r)
	})

	// Messages encrypted by the Java producer, through each cryptoFailure setting.
	for _, action := range []string{"deliver", "discard", "fail"} {
		t.Run("encrypted/cryptoFailure-"+action, func(t *testing.T) {
			if !interopFull && action != "deliver" {
				t.Skip("INTEROP_FULL=1 runs this row")
			}
			r := row(t, "Java producer (encrypted) -> egress")
			interopEncrypted(t, r, action)
		})
	}

	// A Java producer with a JSON schema: egress delivers the payload byte-exact.
	t.Run("json-schema/java-to-egress", func(t *testing.T) {
		r := row(t, "Java producer (Schema.JSON) -> egress")
		javaToEgress(t, r, javapeer.Spec{Count: 20, Schema: "JSON"}, true)
	})
}

// interopKeyPrefix makes keys whose Java hash passes 2^31 and that hold characters
// outside ASCII (one outside the Basic Multilingual Plane, two UTF-16 units).
const interopKeyPrefix = "agent-\u00e9-\u043a\u043b\u044e\u0447-\U0001f600/framework-7f3c9e2a-"

// interopPartitions: Java (with hashing scheme javaScheme) and the bridge (with
// pulsar.hashingScheme bridgeScheme, "" for its default) publish the same keys to a
// 3-partition topic; every key must land on one partition only.
func interopPartitions(t *testing.T, r *interopRow, javaScheme, bridgeScheme string) {
	b := broker.Get(t)
	topic := b.Topic(t, "interop-parts")
	b.CreatePartitionedTopic(t, topic, 3)
	const keys, per = 24, 2
	jsent := mustProduce(t, javapeer.Spec{URL: b.URL, Topic: topic, Count: keys * per, Size: 50, Keys: keys, KeyPrefix: interopKeyPrefix, Hashing: javaScheme})
	extra := ""
	if bridgeScheme != "" {
		extra = "  hashingScheme: " + bridgeScheme
	}
	p := ingressBridge(t, b, topic, extra, "")
	recs, ks := ingressRecordsKeyed(keys*per, []int{80}, keys, interopKeyPrefix)
	publishIngress(t, p, recs, false)
	got, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: topic, Subscription: "check", Count: 2 * keys * per, TimeoutMs: 20000})
	fromBridge := map[string]bool{}
	var sent []string
	for _, rec := range recs {
		fromBridge[hashOf(rec)] = true
		sent = append(sent, hashOf(rec))
	}
	sent = append(sent, sentHashes(jsent)...)
	jpart := map[string]map[int]bool{} // key -> partitions, per producer
	bpart := map[string]map[int]bool{}
	var hs []string
	for _, m := range got {
		hs = append(hs, m.SHA256)
		dst := jpart
		if fromBridge[m.SHA256] {
			dst = bpart
		}
		if dst[m.Key] == nil {
			dst[m.Key] = map[int]bool{}
		}
		dst[m.Key][m.ID.Partition] = true
	}
	r.tallyHashes(sent, hs)
	differ := 0
	var eg []string
	for i := range keys {
		k := ks[i]
		if len(jpart[k]) != 1 || len(bpart[k]) != 1 || fmt.Sprint(jpart[k]) != fmt.Sprint(bpart[k]) {
			differ++
			if len(eg) < 3 {
				eg = append(eg, fmt.Sprintf("%s: Java %v, bridge %v", k, keys2(jpart[k]), keys2(bpart[k])))
			}
		}
	}
	r.Mismatch += differ
	r.Note = fmt.Sprintf("%d of %d keys on different partitions", differ, keys)
	if len(eg) > 0 {
		r.Note += " (" + strings.Join(eg, "; ") + ")"
	}
	r.check(t)
}

func keys2(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// interopJavaAcksPartOfABridgeBatch: the bridge publishes a batch; a Java consumer with
// batch-index acknowledgement acks every other message and leaves; the next consumer of
// the subscription gets exactly the others.
func interopJavaAcksPartOfABridgeBatch(t *testing.T, r *interopRow) {
	b := broker.Get(t)
	r.batchMates(t, b)
	topic := b.Topic(t, "interop-bia")
	p := ingressBridge(t, b, topic, "", "")
	// Enough records to outpace the broker: the producer sends a record alone while the
	// broker keeps up (up to 32 in flight), so only the ones behind share entries.
	const n = batchedRecords
	recs, _ := ingressRecords(n, []int{60}, 2)
	publishIngress(t, p, recs, false)
	spec := javapeer.Spec{URL: b.URL, Topic: topic, Subscription: "check", Type: "Shared", Count: n, TimeoutMs: 20000, BatchIndexAck: true, Ack: "mod", AckMod: 2}
	first, _ := javapeer.Consume(t, spec)
	var acked, rest []string
	batched := 0
	for _, m := range first {
		if m.ID.BatchSize > 1 {
			batched++
		}
		if m.Action == "ack" {
			acked = append(acked, m.SHA256)
		} else {
			rest = append(rest, m.SHA256)
		}
	}
	if batched == 0 {
		t.Fatalf("no message of the bridge's came in a batch: the row tests nothing")
	}
	spec.Ack, spec.Count, spec.TimeoutMs = "all", 0, 5000
	second, _ := javapeer.Consume(t, spec)
	var again []string
	for _, m := range second {
		again = append(again, m.SHA256)
	}
	r.tallyHashes(rest, again)
	r.ackedAgain(acked, again)
	r.Sent = n
	r.Received = len(first) + len(second)
	r.Lost += n - len(first)
	r.Note = fmt.Sprintf("first consumer: %d received (%d in batches), %d acked; redelivered: %d", len(first), batched, len(acked), len(second))
	r.check(t)
}

// interopEgressAcksPartOfAJavaBatch: a Java producer's batch is read by egress (ack:
// client), which acknowledges every other message and disconnects; the next GET gets
// exactly the others.
func interopEgressAcksPartOfAJavaBatch(t *testing.T, r *interopRow) {
	b := broker.Get(t)
	r.batchMates(t, b)
	const n = 20
	spec := javapeer.Spec{URL: b.URL, Topic: b.Topic(t, "interop-bia"), Count: n, Size: 60, BatchMaxMessages: n, BatchDelayMs: 200}
	sent := mustProduce(t, spec)
	if sent[n-1].ID.BatchIndex == 0 && sent[n-1].ID.Entry != sent[0].ID.Entry {
		t.Fatalf("the Java producer sent no batch: %+v", sent[n-1].ID)
	}
	p := egressBridge(t, b, spec.Topic, "    envelope: json\n    ack: client\n    type: shared\n    ackTimeout: 10m", "")
	rd := openEgressReader(t, p.DataURL+"/v1/streams/out", true)
	recs := rd.readAll(t, n, 15*time.Second, 500*time.Millisecond, true)
	var ids, ackedH []string
	var rest []string
	for i, e := range recs {
		if i%2 == 0 {
			ids = append(ids, e.MessageID)
			ackedH = append(ackedH, hashOf(e.bytes()))
		} else {
			rest = append(rest, hashOf(e.bytes()))
		}
	}
	body, _ := json.Marshal(ids)
	if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", rd.sid, "application/json", body); st != 200 {
		t.Fatalf("ack: %d %v", st, m)
	}
	rd.close()
	rd2 := openEgressReader(t, p.DataURL+"/v1/streams/out", true)
	recs2 := rd2.readAll(t, len(rest), 15*time.Second, 2*time.Second, true)
	var again []string
	for _, e := range recs2 {
		again = append(again, hashOf(e.bytes()))
	}
	r.tallyHashes(rest, again)
	r.ackedAgain(ackedH, again)
	r.Sent, r.Received = n, len(recs)+len(recs2)
	r.Lost += n - len(recs)
	r.Note = fmt.Sprintf("first GET: %d received, %d acked; second GET: %d", len(recs), len(ids), len(recs2))
	r.check(t)
}

// interopJavaNacksInsideABridgeBatch: a Java consumer (Shared, DeadLetterPolicy 1
// redelivery) nacks every delivery of the even messages of a bridge batch and acks the
// rest: each even one comes twice, then is on the dead-letter topic with REAL_TOPIC and
// ORIGIN_MESSAGE_ID.
func interopJavaNacksInsideABridgeBatch(t *testing.T, r *interopRow) {
	b := broker.Get(t)
	r.batchMates(t, b)
	topic := b.Topic(t, "interop-nack")
	p := ingressBridge(t, b, topic, "", "")
	const n = 10
	recs, _ := ingressRecords(n, []int{60}, 2)
	publishIngress(t, p, recs, false)
	var poison []string
	for i, rec := range recs {
		if i%2 == 0 {
			poison = append(poison, hashOf(rec))
		}
	}
	dlq := topic + "-check-DLQ"
	// Batch-index acks on: without them the broker redelivers a nacked message's whole
	// batch, acknowledged neighbours too (the Java client's own behaviour with its own batches).
	// It reads until nothing came for 4 s: the dead letters are written when the last nack's
	// redelivery comes due, after every delivery was seen.
	// On a broker without them, the Java consumer runs with its default (off), as its users
	// there would: with them on it acknowledges indexes the broker ignores, and the
	// dead-lettered messages' batches came back for ever (12 795 deliveries of 10 messages
	// in three minutes, seen with the reference client 4.0.8).
	got, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: topic, Subscription: "check", Type: "Shared", TimeoutMs: 4000,
		BatchIndexAck: !r.wholeBatches, NackSHA256: poison, NegativeAckDelayMs: 100, DLQMaxRedeliver: 1, DLQSubscription: "dlq-check"})
	// On a broker that redelivers whole batches the Java client dead-letters the batch-mates
	// that came back with a poison message too: the dead-letter topic is read until quiet.
	want := len(poison)
	if r.wholeBatches {
		want = 0
	}
	dead, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: dlq, Subscription: "dlq-check", Count: want, TimeoutMs: 10000})
	interopDLQTally(t, r, topic, recs, poison, got, dead, 2)
}

// interopDLQTally counts a nack/DLQ row: every message received; each poison one
// delivered deliveries times, then once on the dead-letter topic with the Java client's
// properties.
func interopDLQTally(t *testing.T, r *interopRow, topic string, recs [][]byte, poison []string, got []javapeer.Message, dead []javapeer.Message, deliveries int) {
	isPoison := map[string]bool{}
	for _, h := range poison {
		isPoison[h] = true
	}
	count := map[string]int{}
	for _, m := range got {
		count[m.SHA256]++
	}
	r.Sent = len(recs)
	r.Received = len(got)
	short := 0
	for _, rec := range recs {
		h := hashOf(rec)
		switch {
		case count[h] == 0:
			r.Lost++
		case isPoison[h] && count[h] < deliveries:
			short++
		case isPoison[h] && count[h] > deliveries, !isPoison[h] && count[h] > 1:
			r.Dup++
		}
	}
	var dh []string
	badProps := 0
	for _, m := range dead {
		dh = append(dh, m.SHA256)
		if m.Properties["REAL_TOPIC"] != topic || m.Properties["ORIGIN_MESSAGE_ID"] == "" {
			badProps++
			if badProps == 1 {
				r.Note = fmt.Sprintf("dead letter properties %v; ", m.Properties)
			}
		}
	}
	var dl dlqCounts
	dl.tally(poison, dh)
	if r.wholeBatches {
		// Dead letters that are sent messages but not poison ones are batch-mates the
		// broker sent again with a poison one: duplicates, not strangers.
		sentH := map[string]bool{}
		for _, rec := range recs {
			sentH[hashOf(rec)] = true
		}
		for _, h := range dh {
			if !isPoison[h] && sentH[h] {
				dl.mismatch--
				dl.dup++
			}
		}
	}
	r.Mismatch = badProps + dl.mismatch
	r.Note += fmt.Sprintf("poison %d: delivered fewer than %d times %d; dead letters %d (missing %d, extra %d)", len(poison), deliveries, short, len(dead), dl.lost, dl.dup)
	r.Lost += dl.lost
	r.Dup += dl.dup
	if short > 0 || dl.lost > 0 || dl.dup > 0 && !r.wholeBatches {
		t.Errorf("%s", r.Note)
	}
	r.check(t)
}

type dlqCounts struct{ lost, dup, mismatch int }

func (d *dlqCounts) tally(want, got []string) {
	var x interopRow
	x.tallyHashes(want, got)
	d.lost, d.dup, d.mismatch = x.Lost, x.Dup, x.Mismatch
}

// interopEgressNacksInsideAJavaBatch: a Java producer's batch read by egress (shared,
// ack: client, retry.maxDeliveries 2): the client nacks every delivery of the even
// messages and acks the rest; each even one comes twice, then is on the dead-letter
// topic, read by a Java consumer, with REAL_TOPIC and ORIGIN_MESSAGE_ID.
func interopEgressNacksInsideAJavaBatch(t *testing.T, r *interopRow) {
	b := broker.Get(t)
	r.batchMates(t, b)
	const n = 10
	spec := javapeer.Spec{URL: b.URL, Topic: b.Topic(t, "interop-nack"), Count: n, Size: 60, BatchMaxMessages: n, BatchDelayMs: 200}
	sent := mustProduce(t, spec)
	dlq := spec.Topic + "-bridge-out-DLQ"
	b.MustAdmin(t, http.MethodPut, "/admin/v2/"+strings.Replace(dlq, "://", "/", 1)+"/subscription/dlq-check", nil)
	p := egressBridge(t, b, spec.Topic, `    envelope: json
    ack: client
    type: shared
    retry: {initial: 100ms, max: 200ms, jitter: 0, maxDeliveries: 2}`, "")
	var poison []string
	isPoison := map[string]bool{}
	recs := make([][]byte, n)
	for i, m := range sent {
		if i%2 == 0 {
			poison = append(poison, m.SHA256)
			isPoison[m.SHA256] = true
		}
	}
	rd := openEgressReader(t, p.DataURL+"/v1/streams/out", true)
	var got []javapeer.Message
	for {
		wait := 8 * time.Second
		if len(got) >= n+len(poison) { // every delivery expected came: only a surplus is left to see
			wait = 2 * time.Second
		}
		e, ok := rd.next(t, wait, true)
		if !ok {
			break
		}
		h := hashOf(e.bytes())
		got = append(got, javapeer.Message{SHA256: h})
		path := "/ack"
		if isPoison[h] {
			path = "/nack"
		}
		body, _ := json.Marshal([]string{e.MessageID})
		if st, m := postAck(t, p.DataURL+"/v1/streams/out"+path, rd.sid, "application/json", body); st != 200 {
			t.Fatalf("%s: %d %v", path, st, m)
		}
	}
	dead, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: dlq, Subscription: "dlq-check", Count: len(poison), TimeoutMs: 5000})
	// The sent messages' hashes stand in for records.
	for i, m := range sent {
		recs[i] = []byte(m.SHA256)
	}
	hashed := make([]javapeer.Message, len(got))
	for i, g := range got {
		hashed[i] = javapeer.Message{SHA256: hashOf([]byte(g.SHA256))}
	}
	poisonH := make([]string, len(poison))
	for i, h := range poison {
		poisonH[i] = hashOf([]byte(h))
	}
	deadH := make([]javapeer.Message, len(dead))
	for i, d := range dead {
		deadH[i] = d
		deadH[i].SHA256 = hashOf([]byte(d.SHA256))
	}
	interopDLQTally(t, r, spec.Topic, recs, poisonH, hashed, deadH, 2)
}

// interopEncrypted: a Java producer encrypts (RSA key made with openssl); the Java
// consumer with the private key reads the plaintext (the reference), and egress, which
// holds no key, behaves as its stream's cryptoFailure says: deliver hands the encrypted
// payload over (as the Java client's CONSUME), discard acknowledges it and delivers
// nothing (DISCARD), fail delivers nothing and leaves it on the subscription (FAIL).
func interopEncrypted(t *testing.T, r *interopRow, action string) {
	b := broker.Get(t)
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "private.pem"), filepath.Join(dir, "public.pem")
	if out, err := exec.Command("openssl", "genrsa", "-out", priv, "2048").CombinedOutput(); err != nil {
		t.Skipf("openssl genrsa: %v %s", err, out)
	}
	if out, err := exec.Command("openssl", "rsa", "-in", priv, "-pubout", "-out", pub).CombinedOutput(); err != nil {
		t.Fatalf("openssl rsa: %v %s", err, out)
	}
	const n = 5
	spec := javapeer.Spec{URL: b.URL, Topic: b.Topic(t, "interop-enc"), Count: n, Size: 100, EncryptKey: "k1", PublicKey: pub}
	sent := mustProduce(t, spec)
	ref, _ := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: spec.Topic, Subscription: "reference", Count: n, TimeoutMs: 15000, PrivateKey: priv})
	var refH []string
	for _, m := range ref {
		refH = append(refH, m.SHA256)
	}
	var refRow interopRow
	refRow.tallyHashes(sentHashes(sent), refH)
	if refRow.Lost+refRow.Dup+refRow.Mismatch > 0 {
		t.Fatalf("the Java consumer with the key did not read what was sent: %+v", refRow)
	}
	r.Sent = n
	r.Note = "the bridge did not start with cryptoFailure: " + action
	p := egressBridge(t, b, spec.Topic, "    envelope: json\n    cryptoFailure: "+action, "")
	rd := openEgressReader(t, p.DataURL+"/v1/streams/out", true)
	recs := rd.readAll(t, n, 8*time.Second, time.Second, true)
	r.Sent, r.Received = n, len(recs)
	plain := map[string]bool{}
	for _, m := range sent {
		plain[m.SHA256] = true
	}
	for _, e := range recs {
		if plain[hashOf(e.bytes())] {
			r.Mismatch++ // plaintext out of a bridge that holds no key
		}
	}
	rd.close()
	backlog := subscriptionBacklog(t, b, spec.Topic, "bridge-out")
	r.Note = fmt.Sprintf("Java consumer with the key: %d of %d plaintext; egress: %d records, backlog after %d", len(ref), n, len(recs), backlog)
	// The broker's backlog counts entries, and the Java producer batches.
	entries := map[[2]int64]bool{}
	for _, m := range sent {
		entries[[2]int64{m.ID.Ledger, m.ID.Entry}] = true
	}
	switch action {
	case "deliver":
		// As the Java client's CONSUME: an entry the bridge cannot decrypt comes whole,
		// a batch as one record that says how many messages it holds.
		inside := 0
		for _, e := range recs {
			if !e.Encrypted || e.Encryption == nil {
				r.Mismatch++
				continue
			}
			inside += max(e.Encryption.BatchSize, 1)
		}
		r.Lost = max(0, len(entries)-len(recs)) + max(0, n-inside)
		r.Dup = max(0, len(recs)-len(entries))
		r.Note += fmt.Sprintf(" (%d entries, %d messages inside the records)", len(entries), inside)
	case "discard":
		r.Dup = len(recs)
		if backlog != 0 {
			t.Errorf("discard left %d messages on the subscription", backlog)
		}
	case "fail":
		r.Dup = len(recs)
		if backlog != int64(len(entries)) {
			t.Errorf("fail left %d of the %d entries (%d messages) on the subscription", backlog, len(entries), n)
		}
	}
	r.check(t)
}
