package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// namedFake is a NamedPublisher: it records what it is given, answers the sequence
// numbers in dups as duplicates and those in fail as unavailable.
type namedFake struct {
	*fakePublisher
	mu     sync.Mutex
	claims map[string]bool
	seen   []Message
	dups   map[int64]bool
	fail   map[int64]bool
}

func newNamedFake() *namedFake {
	return &namedFake{fakePublisher: newFake(), claims: map[string]bool{}, dups: map[int64]bool{}, fail: map[int64]bool{}}
}

func (f *namedFake) PublishAsync(ctx context.Context, m *Message, done func(string, error)) {
	f.mu.Lock()
	f.seen = append(f.seen, Message{Topic: m.Topic, Producer: m.Producer, Sequence: m.Sequence})
	dup, fail := f.dups[m.Sequence], f.fail[m.Sequence]
	f.mu.Unlock()
	switch {
	case m.Producer != "" && dup:
		done("", ErrDuplicate)
	case fail:
		done("", fmt.Errorf("%w: broker gone", ErrUnavailable))
	default:
		f.fakePublisher.PublishAsync(ctx, m, done)
	}
}

func (f *namedFake) ClaimStream(producer string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claims[producer] {
		return nil, ErrStreamBusy
	}
	f.claims[producer] = true
	return func() { f.mu.Lock(); delete(f.claims, producer); f.mu.Unlock() }, nil
}

// post sends records in one request with the headers given and returns the status and
// the response's records (receipts and summary).
func post(t *testing.T, url string, h map[string]string, recs ...string) (int, []map[string]any) {
	t.Helper()
	var body []byte
	for _, r := range recs {
		body = recordio.AppendRecord(body, []byte(r))
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	if resp.Header.Get("Content-Type") != recordio.MediaRecordIO {
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%d %q: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, []map[string]any{m}
	}
	rd := recordio.NewReader(resp.Body)
	for {
		b, err := rd.Next()
		if err != nil {
			break
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		out = append(out, m)
	}
	return resp.StatusCode, out
}

func TestStreamHeadersAreValidated(t *testing.T) {
	_, url := serve(t, newNamedFake(), table(t, oneRoute), limits)
	for _, h := range []map[string]string{
		{"Stream-Name": "a b"},
		{"Stream-Name": "a/b"},
		{"Stream-Name": string(bytes.Repeat([]byte("x"), 129))},
		{"Stream-Name": "ok", "Stream-Sequence": "-1"},
		{"Stream-Name": "ok", "Stream-Sequence": "+1"},
		{"Stream-Name": "ok", "Stream-Sequence": "9223372036854775808"},
		{"Stream-Name": "ok", "Stream-Sequence": ""},
		{"Stream-Sequence": "1"},
	} {
		if status, out := post(t, url+"/v1/publish/r", h, `{"n":0}`); status != http.StatusBadRequest {
			t.Errorf("%v: status %d (%v), want 400", h, status, out)
		}
	}
	if status, out := post(t, url+"/v1/publish/r", map[string]string{"Stream-Name": string(bytes.Repeat([]byte("a.-_Z9"), 21)) + "xy",
		"Stream-Sequence": "9223372036854775807"}, `{"n":0}`); status != http.StatusOK {
		t.Errorf("128 characters and the largest sequence: status %d (%v), want 200", status, out)
	}
}

func TestNamedStreamReceiptsCarrySequenceAndDuplicate(t *testing.T) {
	pub := newNamedFake()
	pub.dups[11] = true
	_, url := serve(t, pub, table(t, oneRoute), limits)
	status, out := post(t, url+"/v1/publish/r", map[string]string{"Stream-Name": "s1", "Stream-Sequence": "10"},
		`{"n":0}`, `{"n":1}`, `{"n":2}`)
	if status != http.StatusOK || len(out) != 4 {
		t.Fatalf("status %d, %d records: %v", status, len(out), out)
	}
	for i, r := range out[:3] {
		if r["sequence"] != float64(10+i) || r["status"] != float64(200) {
			t.Errorf("receipt %d: %v, want sequence %d", i, r, 10+i)
		}
		_, hasID := r["messageId"]
		if dup := r["duplicate"] == true; dup != (i == 1) || hasID == dup {
			t.Errorf("receipt %d: %v: duplicate and messageId wrong", i, r)
		}
	}
	if sum := out[3]; sum["duplicates"] != float64(1) || sum["resumeSequence"] != float64(13) || sum["published"] != float64(3) {
		t.Errorf("summary %v: want 1 duplicate, resume at 13, 3 published", sum)
	}
	for i, m := range pub.seen {
		if m.Producer != ProducerName("r", "s1") || m.Sequence != int64(10+i) {
			t.Errorf("message %d: producer %q sequence %d", i, m.Producer, m.Sequence)
		}
	}
	// Without a name: no sequence, no producer name.
	status, out = post(t, url+"/v1/publish/r", nil, `{"n":0}`)
	if _, has := out[0]["sequence"]; status != http.StatusOK || has || pub.seen[len(pub.seen)-1].Producer != "" {
		t.Errorf("unnamed: status %d, %v, producer %q", status, out, pub.seen[len(pub.seen)-1].Producer)
	}
}

// A sequence number cannot pass 2^63-1: that record fails on its own with 400.
func TestSequenceNumbersMustIncrease(t *testing.T) {
	pub := newNamedFake()
	_, url := serve(t, pub, table(t, oneRoute), limits)
	status, out := post(t, url+"/v1/publish/r", map[string]string{"Stream-Name": "s", "Stream-Sequence": "9223372036854775806"},
		`{"n":0}`, `{"n":1}`, `{"n":2}`)
	if len(out) != 4 || out[0]["status"] != float64(200) || out[1]["status"] != float64(200) || out[2]["status"] != float64(400) {
		t.Fatalf("status %d: %v; want 200, 200, 400", status, out)
	}
	if len(pub.seen) != 2 {
		t.Fatalf("%d records published, want 2", len(pub.seen))
	}
}

func TestSecondRequestOnTheSameStreamIsRefusedUntilTheFirstEnds(t *testing.T) {
	pub := newNamedFake()
	pub.hold = true
	_, url := serve(t, pub, table(t, oneRoute+`  - name: other
    namespaces: [public/default]
    default: {topic: "o"}
`), limits)
	h := map[string]string{"Stream-Name": "s"}
	w, first := openWith(t, url+"/v1/publish/r", h)
	send(t, w, `{"n":0}`)
	<-pub.arrived
	if status, out := post(t, url+"/v1/publish/r", h, `{"n":1}`); status != http.StatusConflict {
		t.Fatalf("second request: status %d (%v), want 409", status, out)
	}
	pub.releaseAll() // the other route's record need not wait
	if status, out := post(t, url+"/v1/publish/other", h, `{"n":1}`); status != http.StatusOK {
		t.Fatalf("another route with the same stream name: status %d (%v), want 200", status, out)
	}
	w.Close()
	for range first {
	}
	if status, out := post(t, url+"/v1/publish/r", h, `{"n":1}`); status != http.StatusOK {
		t.Fatalf("after the first ended: status %d (%v), want 200", status, out)
	}
}

// The summary names the first record that failed for now, not one refused for good.
func TestSummarySaysWhereToResume(t *testing.T) {
	pub := newNamedFake()
	pub.fail[7] = true
	_, url := serve(t, pub, table(t, oneRoute), limits)
	status, out := post(t, url+"/v1/publish/r", map[string]string{"Stream-Name": "s", "Stream-Sequence": "5"},
		`{"n":0}`, `not json`, `{"n":2}`, `{"n":3}`)
	sum := out[len(out)-1]
	if status != http.StatusOK || sum["resumeSequence"] != float64(7) {
		t.Fatalf("summary %v: want resumeSequence 7 (6 is refused for good with 422)", sum)
	}
	if out[1]["status"] != float64(422) || out[1]["sequence"] != float64(6) {
		t.Fatalf("record 1: %v, want 422 with sequence 6", out[1])
	}
}

// openWith is open with extra request headers.
func openWith(t *testing.T, url string, h map[string]string) (*io.PipeWriter, <-chan map[string]any) {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	out := make(chan map[string]any, 1024)
	ready := make(chan struct{})
	go func() {
		defer close(out)
		resp, err := http.DefaultClient.Do(req)
		close(ready)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		rd := recordio.NewReader(resp.Body)
		for {
			b, err := rd.Next()
			if err != nil {
				return
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%q: %v", b, err)
				return
			}
			out <- m
		}
	}()
	<-ready
	t.Cleanup(func() { pw.Close() })
	return pw, out
}

// dupFake answers every record as one the broker already had.
type dupFake struct{ *fakePublisher }

func (d dupFake) PublishAsync(_ context.Context, _ *Message, done func(string, error)) {
	done("", ErrDuplicate)
}

// An unnamed stream's record that the broker answers as a duplicate is persisted: the
// bridge's producer resent it after a reconnect and the deduplicating broker already had
// it. It is receipted (200, "duplicate"), not failed with 500, which would make the
// client send it again and put a second copy in the topic (found by e2e/chaos, broker
// kill -9 with deduplication on).
func TestUnnamedDuplicateIsAReceipt(t *testing.T) {
	_, url := serve(t, dupFake{newFake()}, table(t, oneRoute), limits)
	status, out := post(t, url+"/v1/publish/r", nil, `{"n":0}`)
	if status != http.StatusOK || len(out) != 2 {
		t.Fatalf("status %d, %d records: %v", status, len(out), out)
	}
	if r := out[0]; r["status"] != float64(200) || r["duplicate"] != true {
		t.Errorf("receipt %v: want 200 with duplicate", r)
	}
	if sum := out[1]; sum["published"] != float64(1) || sum["failed"] != float64(0) {
		t.Errorf("summary %v: want 1 published, 0 failed", sum)
	}
}
