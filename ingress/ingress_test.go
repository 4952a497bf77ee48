package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakePublisher settles messages when the test says so.
type fakePublisher struct {
	mu      sync.Mutex
	held    []func()
	hold    bool
	fail    error
	topics  []string
	queued  atomic.Int64
	arrived chan struct{}
}

func newFake() *fakePublisher { return &fakePublisher{arrived: make(chan struct{}, 1<<16)} }

func (f *fakePublisher) PublishAsync(ctx context.Context, m *Message, done func(string, error)) {
	f.mu.Lock()
	n := len(f.topics)
	f.topics = append(f.topics, m.Topic)
	id := fmt.Sprintf("1:%d:-1:-1", n)
	err := f.fail
	settle := func() { done(id, err) }
	if f.hold {
		f.held = append(f.held, settle)
		f.mu.Unlock()
	} else {
		f.mu.Unlock()
		settle()
	}
	f.queued.Add(1)
	f.arrived <- struct{}{}
}

func (f *fakePublisher) PublishStream(ctx context.Context, m *Message, size int64, r io.Reader) (string, error) {
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		// As the bridge's producer pool classifies a failed send it does not know.
		return "", fmt.Errorf("%w: %w", ErrRefused, err)
	}
	f.mu.Lock()
	f.topics = append(f.topics, m.Topic)
	f.mu.Unlock()
	return fmt.Sprintf("streamed:%d", n), nil
}

// release settles the held messages in the order given (indexes into the held list).
func (f *fakePublisher) release(order ...int) {
	f.mu.Lock()
	held := f.held
	f.mu.Unlock()
	for _, i := range order {
		held[i]()
	}
	f.mu.Lock()
	for _, i := range order {
		f.held[i] = func() {} // settled once only; releaseAll skips it
	}
	f.mu.Unlock()
}

func (f *fakePublisher) releaseAll() {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.hold = false
	f.mu.Unlock()
	for _, h := range held {
		h()
	}
}

func table(t *testing.T, doc string) *mapping.Table {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

var limits = Limits{MaxRecordBytes: 1 << 20, BufferRecordBytes: 1 << 20, MaxStreams: 10, IdleTimeout: 10 * time.Second,
	PendingRecords: 4, PendingBytes: 1 << 20}

func serve(t *testing.T, pub Publisher, tab *mapping.Table, l Limits) (*Server, string) {
	t.Helper()
	s := New(pub, nil, nil, nil)
	s.Update(tab, nil, l)
	e := echo.New()
	s.Register(e)
	hs := httptest.NewUnstartedServer(e)
	hs.EnableHTTP2 = false
	hs.Start()
	t.Cleanup(hs.Close)
	if f, ok := pub.(*fakePublisher); ok {
		t.Cleanup(f.releaseAll) // before the server closes, so no handler waits forever
	}
	return s, hs.URL
}

// open starts a streamed request and returns its body writer and a channel of response records.
func open(t *testing.T, url string) (*io.PipeWriter, <-chan map[string]any) {
	t.Helper()
	return openWith(t, url, nil)
}

func send(t *testing.T, w io.Writer, recs ...string) {
	t.Helper()
	var b []byte
	for _, r := range recs {
		b = recordio.AppendRecord(b, []byte(r))
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, ch <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("response ended")
		}
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no record within 5s")
	}
	return nil
}

const oneRoute = `
routes:
  - name: r
    namespaces: [public/default]
    default: {topic: "t-{json:n}"}
`

func TestReceiptsFollowInputOrderWhenPublishesSettleOutOfOrder(t *testing.T) {
	pub := newFake()
	pub.hold = true
	_, url := serve(t, pub, table(t, oneRoute), limits)
	w, out := open(t, url+"/v1/publish/r")
	send(t, w, `{"n":0}`, `{"n":1}`, `{"n":2}`)
	for range 3 {
		<-pub.arrived
	}
	// The later records settle first (their callbacks have returned before record 0's
	// starts): receipts in settle order would come 2, 1, 0.
	pub.release(2, 1)
	pub.release(0)
	for i := range 3 {
		m := next(t, out)
		if m["seq"] != float64(i) || m["topic"] != fmt.Sprintf("persistent://public/default/t-%d", i) || m["messageId"] == "" {
			t.Fatalf("receipt %d: %v", i, m)
		}
	}
	w.Close()
	if m := next(t, out); m["summary"] != true || m["published"] != float64(3) || m["status"] != float64(200) {
		t.Fatalf("summary %v", m)
	}
}

// countingReader records how many body bytes the handler has consumed.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func TestAFullStreamStopsReadingTheBody(t *testing.T) {
	pub := newFake()
	pub.hold = true
	l := limits
	l.PendingRecords = 4
	_, url := serve(t, pub, table(t, oneRoute), l)
	// 20 000 records of ~1 KiB: far more than the socket buffers and the 4 pending records hold.
	var body []byte
	rec := `{"n":1,"pad":"` + strings.Repeat("x", 1000) + `"}`
	for range 20000 {
		body = recordio.AppendRecord(body, []byte(rec))
	}
	cr := &countingReader{r: strings.NewReader(string(body))}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", cr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	// Four records await receipts in the stream's queue and one in its collector: five
	// reach the publisher, then each receipt lets exactly one more in.
	arrival := func() {
		select {
		case <-pub.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("no record reached the publisher (%d so far)", pub.queued.Load())
		}
	}
	for range 5 {
		arrival()
	}
	for step := range 50 {
		if q := pub.queued.Load(); q > int64(step)+5 {
			t.Fatalf("%d records published with %d receipts given, while only 4 may await receipts", q, step)
		}
		pub.release(step)
		arrival()
	}
	read, queued := cr.n.Load(), pub.queued.Load()
	if read >= int64(len(body))/2 {
		t.Fatalf("the whole body (%d bytes) was read while receipts were held", read)
	}
	pub.releaseAll()
	resp := <-done
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	var ans map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	if resp.StatusCode != 200 || ans["published"] != float64(20000) {
		t.Fatalf("%d %v", resp.StatusCode, ans)
	}
	t.Logf("with receipts held: %d records published, %d of %d body bytes read (socket buffers)", queued, read, len(body))
}

func TestARecordUsesTheRoutesCurrentWhenItArrives(t *testing.T) {
	pub := newFake()
	s, url := serve(t, pub, table(t, oneRoute), limits)
	w, out := open(t, url+"/v1/publish/r")
	send(t, w, `{"n":1}`)
	if m := next(t, out); m["topic"] != "persistent://public/default/t-1" {
		t.Fatalf("%v", m)
	}
	s.Update(table(t, "routes:\n  - name: r\n    default: {topic: moved}\n"), nil, limits)
	send(t, w, `{"n":2}`)
	if m := next(t, out); m["topic"] != "persistent://public/default/moved" {
		t.Fatalf("after the reload: %v", m)
	}
	s.Update(table(t, "routes:\n  - name: other\n    default: {topic: x}\n"), nil, limits)
	send(t, w, `{"n":3}`)
	if m := next(t, out); m["status"] != float64(404) || !strings.Contains(m["error"].(string), "route r was removed by a configuration reload") {
		t.Fatalf("after the route went away: %v", m)
	}
	w.Close()
	if m := next(t, out); m["summary"] != true || m["published"] != float64(2) || m["failed"] != float64(1) || m["status"] != float64(404) {
		t.Fatalf("summary %v", m)
	}
}

func TestDrainAnswersUnsettledRecordsWhenTheTimeoutPasses(t *testing.T) {
	pub := newFake()
	s, url := serve(t, pub, table(t, oneRoute), limits)
	w, out := open(t, url+"/v1/publish/r")
	send(t, w, `{"n":0}`)
	if m := next(t, out); m["status"] != float64(200) {
		t.Fatalf("%v", m)
	}
	pub.mu.Lock()
	pub.hold = true
	pub.mu.Unlock()
	send(t, w, `{"n":1}`)
	<-pub.arrived
	<-pub.arrived
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Drain(ctx); err == nil {
		t.Fatal("Drain returned nil with a record unsettled past its deadline")
	}
	m := next(t, out)
	if m["seq"] != float64(1) || m["status"] != float64(503) || !strings.Contains(m["error"].(string), "outcome unknown") {
		t.Fatalf("unsettled record: %v", m)
	}
	if m := next(t, out); m["summary"] != true || m["status"] != float64(503) || m["published"] != float64(1) {
		t.Fatalf("summary %v", m)
	}
	pub.releaseAll() // the late callback must not disturb anything
	// A new stream is refused while draining.
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("new stream while draining: %d", resp.StatusCode)
	}
}

func TestLargeRecordsAreStreamedToThePublisher(t *testing.T) {
	pub := newFake()
	l := limits
	l.BufferRecordBytes = 1024
	_, url := serve(t, pub, table(t, "routes:\n  - name: r\n    rules:\n      - match: {json: {n: 1}}\n        topic: json\n    default: {topic: big}\n"), l)
	w, out := open(t, url+"/v1/publish/r")
	big := `{"n":1,"pad":"` + strings.Repeat("y", 5000) + `"}`
	send(t, w, `{"n":1}`, big)
	if m := next(t, out); m["topic"] != "persistent://public/default/json" {
		t.Fatalf("%v", m)
	}
	// A streamed record is not visible to JSON rules: it takes the default.
	if m := next(t, out); m["topic"] != "persistent://public/default/big" || m["messageId"] != fmt.Sprintf("streamed:%d", len(big)) {
		t.Fatalf("%v", m)
	}
}

func TestAppendJSONStringEscapes(t *testing.T) {
	for _, s := range []string{"plain", `q"uote`, "back\\slash", "ctl\x01", "ünï"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("%q: %q, %v", s, appendJSONString(nil, s), err)
		}
	}
}

func TestASingleRecordRequestGetsOneAnswer(t *testing.T) {
	pub := newFake()
	_, url := serve(t, pub, table(t, oneRoute), limits)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(`{"n":7}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || ans["records"] != float64(1) || ans["published"] != float64(1) || ans["firstMessageId"] != "1:0:-1:-1" ||
		ans["lastMessageId"] != "1:0:-1:-1" || pub.topics[0] != "persistent://public/default/t-7" {
		t.Fatalf("%d %v (topics %v)", resp.StatusCode, ans, pub.topics)
	}
}

// TestATruncatedStreamedRecordIsTheClientsError: the body ends inside a record streamed
// to the publisher. The record fails with the summary's 400 (the client's body ended),
// not "502 refused by the broker", and nothing of it is receipted 200.
func TestATruncatedStreamedRecordIsTheClientsError(t *testing.T) {
	pub := newFake()
	l := limits
	l.BufferRecordBytes = 1024
	_, url := serve(t, pub, table(t, "routes:\n  - name: r\n    default: {topic: big}\n"), l)
	w, out := open(t, url+"/v1/publish/r")
	send(t, w, `{"n":1}`)
	if m := next(t, out); m["status"] != float64(200) {
		t.Fatalf("%v", m)
	}
	// A 5000-byte record of which only 3000 bytes come before the body ends.
	if _, err := fmt.Fprintf(w, "5000\n%s", strings.Repeat("y", 3000)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	m := next(t, out)
	if m["seq"] != float64(1) || m["status"] != float64(400) || !strings.Contains(m["error"].(string), "truncated") {
		t.Fatalf("the truncated record: %v", m)
	}
	if m := next(t, out); m["summary"] != true || m["status"] != float64(400) || m["published"] != float64(1) || m["failed"] != float64(1) {
		t.Fatalf("summary %v", m)
	}
	if m, ok := <-out; ok {
		t.Fatalf("after the summary: %v", m)
	}
}

// TestAnUnservableMessageAcceptIsRefusedBeforePublishing: 406, and no record reaches the
// publisher.
func TestAnUnservableMessageAcceptIsRefusedBeforePublishing(t *testing.T) {
	pub := newFake()
	_, url := serve(t, pub, table(t, oneRoute), limits)
	for _, h := range []map[string]string{
		{"Accept": "application/recordio", "Message-Accept": "application/x-protobuf"},
		{"Accept": "application/json", "Message-Accept": "application/json"},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(string(recordio.AppendRecord(nil, []byte(`{"n":1}`)))))
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ans map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotAcceptable || !strings.Contains(fmt.Sprint(ans["error"]), "Message-Accept") {
			t.Errorf("%v: %d %v", h, resp.StatusCode, ans)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.topics) != 0 {
		t.Fatalf("published %v", pub.topics)
	}
}

// TestARepeatedMediaTypeHeaderIsRefused: Content-Type or Message-Content-Type given twice
// (with different values) is ambiguous; the request is refused with 400 naming the header
// before anything is published, instead of the first value silently winning.
func TestARepeatedMediaTypeHeaderIsRefused(t *testing.T) {
	pub := newFake()
	_, url := serve(t, pub, table(t, oneRoute), limits)
	for _, h := range []http.Header{
		{"Content-Type": {"application/recordio", "application/json"}, "Message-Content-Type": {"application/json"}},
		{"Content-Type": {"application/recordio"}, "Message-Content-Type": {"application/json", "application/x-protobuf"}},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(string(recordio.AppendRecord(nil, []byte(`{"n":1}`)))))
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ans map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(fmt.Sprint(ans["error"]), "given 2 times") {
			t.Errorf("%v: %d %v", h, resp.StatusCode, ans)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.topics) != 0 {
		t.Fatalf("published %v", pub.topics)
	}
}
