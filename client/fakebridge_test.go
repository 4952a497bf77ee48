package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// fakeBridge is a scripted ingress that keeps the documented contract (streamed receipts,
// the summary, named streams deduplicated by sequence per topic) and fails where a test
// says: before the stream, at a record, or by cutting the connection.
type fakeBridge struct {
	// before answers request n (0-based) before the stream: a status (0: accept) and a
	// Retry-After.
	before func(n int, r *http.Request) (status int, retryAfter string)
	// step says what becomes of record seq in request n; nil: stored on topic "t".
	step func(n int, seq uint64) step

	mu       sync.Mutex
	requests []request           // every request, in order
	stored   map[string][]uint64 // per topic, the sequences stored, in order
	last     map[string]uint64   // per topic, the last sequence stored (named streams)
	records  map[uint64][]byte   // the bytes of each stored sequence
	sent     map[uint64]int      // how often each sequence reached the bridge
	srv      *httptest.Server
}

type request struct {
	header   http.Header
	sequence uint64 // Stream-Sequence (0 without)
	proto    int    // HTTP major version
	accepted bool
}

type step struct {
	status int    // 0 or 200: stored; a failure status otherwise
	topic  string // default "t"
	cut    bool   // store (if status is 200) and cut the connection before the receipt
	stop   bool   // with a failure: stop reading, end with the summary (resumeSequence)
}

func newFakeBridge(t *testing.T) *fakeBridge {
	f := &fakeBridge{stored: map[string][]uint64{}, last: map[string]uint64{}, records: map[uint64][]byte{}, sent: map[uint64]int{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// newFakeBridgeTLS is newFakeBridge over https (HTTP/2 when the client offers it).
func newFakeBridgeTLS(t *testing.T) *fakeBridge {
	f := &fakeBridge{stored: map[string][]uint64{}, last: map[string]uint64{}, records: map[uint64][]byte{}, sent: map[uint64]int{}}
	f.srv = httptest.NewUnstartedServer(f)
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeBridge) url() string { return f.srv.URL + "/v1/publish/r" }

func (f *fakeBridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq0, _ := strconv.ParseUint(r.Header.Get("Stream-Sequence"), 10, 64)
	named := r.Header.Get("Stream-Name") != ""
	f.mu.Lock()
	n := len(f.requests)
	f.requests = append(f.requests, request{header: r.Header.Clone(), sequence: seq0, proto: r.ProtoMajor})
	f.mu.Unlock()
	if f.before != nil {
		if status, ra := f.before(n, r); status != 0 {
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Connection", "close") // as the bridge: the body has not ended
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"status":%d,"error":"scripted refusal"}`, status)
			return
		}
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // receipts go out while the body is still read, as the bridge does
	f.mu.Lock()
	f.requests[n].accepted = true
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/recordio")
	w.Header().Set("Message-Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	rd := recordio.NewReader(r.Body)
	var published, failed, dups int64
	var firstFailure *uint64
	summary := func(status int, msg string, retryAfter int) {
		s := map[string]any{"summary": true, "records": published + failed, "published": published, "failed": failed, "status": status}
		if msg != "" {
			s["error"] = msg
		}
		if retryAfter > 0 {
			s["retryAfter"] = retryAfter
		}
		if named {
			next := seq0 + uint64(published+failed)
			if firstFailure != nil {
				next = *firstFailure
			}
			s["duplicates"], s["resumeSequence"] = dups, next
		}
		b, _ := json.Marshal(s)
		_, _ = w.Write(recordio.AppendRecord(nil, b))
		_ = rc.Flush()
	}
	for i := uint64(0); ; i++ {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			if firstFailure != nil {
				summary(503, "record failed for now", 1)
			} else {
				summary(200, "", 0)
			}
			return
		}
		if err != nil {
			return // the client went away
		}
		seq := seq0 + i
		if !named {
			seq = i // unnamed streams: the test's records carry their own numbers
			if v, err := strconv.ParseUint(string(rec), 10, 64); err == nil {
				seq = v
			}
		}
		s := step{}
		if f.step != nil {
			s = f.step(n, seq)
		}
		if s.topic == "" {
			s.topic = "t"
		}
		f.mu.Lock()
		f.sent[seq]++
		f.mu.Unlock()
		receipt := map[string]any{"seq": i, "status": s.status}
		if named {
			receipt["sequence"] = seq
		}
		if s.status == 0 || s.status == 200 {
			receipt["status"] = 200
			receipt["topic"] = s.topic
			if dup := f.store(s.topic, seq, rec, named); dup {
				receipt["duplicate"] = true
				dups++
			} else {
				receipt["messageId"] = fmt.Sprintf("1:%d:-1:-1", seq)
			}
			published++
		} else {
			receipt["error"] = "scripted failure " + strconv.Itoa(s.status)
			failed++
			if s.status == 503 && firstFailure == nil {
				firstFailure = &seq
			}
		}
		if s.cut {
			panic(http.ErrAbortHandler) // the receipt is lost with the connection
		}
		b, _ := json.Marshal(receipt)
		_, _ = w.Write(recordio.AppendRecord(nil, b))
		_ = rc.Flush()
		if s.stop {
			summary(s.status, "record "+strconv.FormatUint(seq, 10)+": scripted failure", 1)
			return
		}
	}
}

// store keeps rec unless (named) the topic has a sequence at or above seq already.
func (f *fakeBridge) store(topic string, seq uint64, rec []byte, named bool) (duplicate bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if last, ok := f.last[topic]; named && ok && seq <= last {
		return true
	}
	f.last[topic] = seq
	f.stored[topic] = append(f.stored[topic], seq)
	f.records[seq] = append([]byte(nil), rec...)
	return false
}

// storedOnce checks that sequences [0, n) except skip were each stored once, in order per
// topic, and nothing else was.
func (f *fakeBridge) storedOnce(t *testing.T, n uint64, skip map[uint64]bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	count := map[uint64]int{}
	for topic, seqs := range f.stored {
		for i, s := range seqs {
			count[s]++
			if i > 0 && seqs[i-1] >= s {
				t.Errorf("topic %s: %d stored after %d", topic, s, seqs[i-1])
			}
		}
	}
	for s := uint64(0); s < n; s++ {
		want := 1
		if skip[s] {
			want = 0
		}
		if count[s] != want {
			t.Errorf("record %d stored %d times, want %d", s, count[s], want)
		}
	}
	for s, c := range count {
		if s >= n {
			t.Errorf("record %d, never published, stored %d times", s, c)
		}
	}
}

func (f *fakeBridge) requestLog() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}
