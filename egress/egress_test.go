package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSub delivers what the test feeds it and records acks and nacks.
type fakeSub struct {
	feed   chan *Delivery
	mu     sync.Mutex
	acked  []string
	nacked []string
	delays []time.Duration // each Nack's delay
	closed bool
	ackErr map[string]error // Ack fails once for these ids
	endErr error            // what Receive returns once feed is closed [ErrEndOfTopic]
}

func (f *fakeSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *fakeSub) Receive(ctx context.Context) (*Delivery, error) {
	select {
	case d, ok := <-f.feed:
		if !ok {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.endErr != nil {
				return nil, f.endErr
			}
			return nil, ErrEndOfTopic
		}
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeSub) TryReceive() (*Delivery, bool) {
	select {
	case d, ok := <-f.feed:
		if !ok {
			return nil, false
		}
		return d, true
	default:
		return nil, false
	}
}

func (f *fakeSub) Ack(d *Delivery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ackErr != nil && f.ackErr[d.ID] != nil {
		err := f.ackErr[d.ID]
		delete(f.ackErr, d.ID)
		return err
	}
	f.acked = append(f.acked, d.ID)
	return nil
}

func (f *fakeSub) Nack(d *Delivery, after time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nacked = append(f.nacked, d.ID)
	f.delays = append(f.delays, after)
}

// dlqSub is a fakeSub that can dead-letter; the first dlqFails publications fail.
type dlqSub struct {
	*fakeSub
	dlqFails int
	dead     []string // id@topic
}

func (f *dlqSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *dlqSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dlqFails > 0 {
		f.dlqFails--
		return errors.New("the dead-letter topic is not reachable")
	}
	f.dead = append(f.dead, d.ID+"@"+topic)
	return nil
}

func (f *fakeSub) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func serveStreams(t *testing.T, sub Subscriber, doc string) string {
	t.Helper()
	_, url := serveStreamsOn(t, sub, doc)
	return url
}

// serveStreamsOn serves sub's streams and returns the Server too.
func serveStreamsOn(t *testing.T, sub Subscriber, doc string) (*Server, string) {
	t.Helper()
	return serveStreamsWith(t, sub, doc, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
}

// serveStreamsWith serves sub's streams with limits l.
func serveStreamsWith(t *testing.T, sub Subscriber, doc string, l Limits) (*Server, string) {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(sub, nil, nil, nil)
	auth, err := admission.Compile(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	s.Update(tab, auth, l)
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	return s, hs.URL
}

func TestHeartbeatsWhenIdleAndACleanEndOfTopic(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    heartbeatInterval: 50ms\n    heartbeat: '{\"type\":\"HEARTBEAT\"}'\n")
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	for range 2 {
		if rec, err := rd.Next(); err != nil || string(rec) != `{"type":"HEARTBEAT"}` {
			t.Fatalf("%q %v", rec, err)
		}
	}
	f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: []byte("payload")}
	for {
		rec, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if string(rec) == "payload" {
			break
		}
	}
	close(f.feed)
	for {
		_, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream did not end cleanly: %v", err)
		}
	}
	if got := resp.Trailer.Get("Stream-Error"); got != "" {
		t.Fatalf("a clean end of topic has a Stream-Error trailer: %q", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acked) != 1 || !f.closed {
		t.Fatalf("acked %v closed %v", f.acked, f.closed)
	}
}

func TestResolveQuery(t *testing.T) {
	def := &mapping.Stream{Name: "s", Subscription: "sub", Position: "latest", Ack: "auto", Envelope: "none", Overrides: []string{"envelope", "subscription"}}
	cases := []struct {
		q, err string
		want   options
	}{
		{"", "", options{"sub", "latest", "auto", "none"}},
		{"envelope=json&subscription=mine", "", options{"mine", "latest", "auto", "json"}},
		{"position=earliest", "does not let clients choose position", options{}},
		{"envelope=xml", `envelope="xml" is not one of none, json`, options{}},
		{"subscription=a/b", "is not a subscription name", options{}},
		{"x=1", `unknown query parameter "x"`, options{}},
		{"envelope=json&envelope=none", `query parameter "envelope" given 2 times`, options{}},
		{"envelope=json&%zz", "is malformed", options{}},
		{"subscription=a%00b", "is not a subscription name", options{}},
		{"subscription=" + strings.Repeat("a", 257), "is not a subscription name", options{}},
		{"subscription=" + strings.Repeat("a", 256), "", options{strings.Repeat("a", 256), "latest", "auto", "none"}},
	}
	for _, c := range cases {
		req := httptest.NewRequest(http.MethodGet, "/v1/streams/s?"+c.q, nil)
		got, err := resolveQuery(def, req)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.q, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v", c.q, got, err)
		}
	}
}

func TestEnvelopeCarriesJSONRawAndOtherPayloadsInBase64(t *testing.T) {
	st := &stream{opts: options{envelope: "json"}}
	for payload, field := range map[string]string{`{"a":1}`: `"payload":{"a":1}`, "\x00bin": `"payloadBase64":"AGJpbg=="`} {
		buf := st.appendRecord(nil, &Delivery{ID: "1:2:-1:-1", Topic: "t", Payload: []byte(payload), PublishTime: time.Unix(0, 0)})
		rec, err := recordio.NewReader(strings.NewReader(string(buf))).Next()
		if err != nil || !strings.Contains(string(rec), field) || !json.Valid(rec) {
			t.Errorf("%q: %s %v", payload, rec, err)
		}
	}
}

// TestEnvelopeCarriesTheOrderingKey: a message's ordering key (bytes, set by a Java
// producer's orderingKey) is in the JSON envelope, base64-encoded; none, no field.
func TestEnvelopeCarriesTheOrderingKey(t *testing.T) {
	st := &stream{opts: options{envelope: "json"}}
	for _, c := range []struct {
		key  []byte
		want string
	}{{[]byte("o1"), `"orderingKey":"bzE="`}, {[]byte{0xff, 0}, `"orderingKey":"/wA="`}, {nil, ""}} {
		buf := st.appendRecord(nil, &Delivery{ID: "1:2:-1:-1", Topic: "t", Key: "k", OrderingKey: c.key, Payload: []byte(`{}`), PublishTime: time.Unix(0, 0)})
		rec, err := recordio.NewReader(strings.NewReader(string(buf))).Next()
		if err != nil || (c.want != "" && !strings.Contains(string(rec), c.want)) || (c.want == "" && strings.Contains(string(rec), "orderingKey")) {
			t.Errorf("%q: %s %v", c.key, rec, err)
		}
	}
}

// TestAFailedAckKeepsTheID: the broker fails the acknowledgement of one id; the client
// learns which id failed (and which were not processed), and posting it again succeeds.
func TestAFailedAckKeepsTheID(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10), ackErr: map[string]error{"1:1:-1:-1": errors.New("connection closed")}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n")
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ids := []string{"1:0:-1:-1", "1:1:-1:-1", "1:2:-1:-1"}
	for _, id := range ids {
		f.feed <- &Delivery{ID: id, Payload: []byte(`{}`)}
	}
	rd := recordio.NewReader(resp.Body)
	for range ids {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	post := func(ids ...string) (int, map[string]any) {
		body, _ := json.Marshal(ids)
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/streams/s/ack", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var ans map[string]any
		_ = json.NewDecoder(r.Body).Decode(&ans)
		return r.StatusCode, ans
	}
	status, ans := post(ids...)
	if status != 503 || ans["acked"] != float64(1) || ans["failed"] != "1:1:-1:-1" ||
		fmt.Sprint(ans["notAcked"]) != "[1:1:-1:-1 1:2:-1:-1]" {
		t.Fatalf("%d %v", status, ans)
	}
	if status, ans := post("1:1:-1:-1", "1:2:-1:-1"); status != 200 || ans["acked"] != float64(2) {
		t.Fatalf("posting the failed ids again: %d %v", status, ans)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.acked) != fmt.Sprint(ids) {
		t.Fatalf("acked %v", f.acked)
	}
}

// TestAckClientWithoutEnvelopeIsAllowed: a client reading bare payloads acknowledges by
// record position, so it may choose ack=client.
func TestAckClientWithoutEnvelopeIsAllowed(t *testing.T) {
	def := &mapping.Stream{Name: "s", Subscription: "sub", Position: "latest", Ack: "auto", Envelope: "none", Overrides: []string{"ack", "envelope"}}
	req := httptest.NewRequest(http.MethodGet, "/v1/streams/s?ack=client", nil)
	if o, err := resolveQuery(def, req); err != nil || o.ack != "client" || o.envelope != "none" {
		t.Fatalf("ack=client, envelope=none: %+v %v", o, err)
	}
}

// get opens a stream and returns the response and its record reader.
func get(t *testing.T, url string) (*http.Response, *recordio.Reader) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	return resp, recordio.NewReader(resp.Body, recordio.MaxRecordSize(16<<20))
}

// chunked is a reassembled chunked message: its payload in pieces, read through Body.
type chunked struct {
	pieces [][]byte
	r      io.Reader
}

func newChunked(n, size int) (*chunked, []byte) {
	c := &chunked{}
	var whole []byte
	var rs []io.Reader
	for i := range n {
		p := bytes.Repeat([]byte{byte('a' + i)}, size)
		c.pieces = append(c.pieces, p)
		whole = append(whole, p...)
		rs = append(rs, bytes.NewReader(p))
	}
	c.r = io.MultiReader(rs...)
	return c, whole
}

// TestAStreamedBodyIsWrittenWhole: a message delivered as a Body (a reassembled chunked
// message, never joined) reaches the client byte for byte, bare and in the JSON envelope
// (as payloadBase64), and is acknowledged once written.
func TestAStreamedBodyIsWrittenWhole(t *testing.T) {
	for _, env := range []string{"none", "json"} {
		t.Run(env, func(t *testing.T) {
			f := &fakeSub{feed: make(chan *Delivery, 10)}
			url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    envelope: "+env+"\n")
			_, rd := get(t, url+"/v1/streams/s")
			c, whole := newChunked(5, 300<<10)
			f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"small":1}`)}
			f.feed <- &Delivery{ID: "1:1:-1:-1", Body: c.r, Size: int64(len(whole))}
			f.feed <- &Delivery{ID: "1:2:-1:-1", Payload: bytes.Repeat([]byte("z"), 100<<10)}
			close(f.feed)
			var got [][]byte
			for {
				rec, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, bytes.Clone(rec))
			}
			if len(got) != 3 {
				t.Fatalf("%d records", len(got))
			}
			payload := got[1]
			if env == "json" {
				var e struct {
					MessageID     string `json:"messageId"`
					PayloadBase64 []byte `json:"payloadBase64"`
				}
				if err := json.Unmarshal(payload, &e); err != nil || e.MessageID != "1:1:-1:-1" {
					t.Fatalf("%v %q", err, e.MessageID)
				}
				payload = e.PayloadBase64
			}
			if !bytes.Equal(payload, whole) {
				t.Fatalf("the streamed message: %d bytes, want %d", len(payload), len(whole))
			}
			if env == "none" && (string(got[0]) != `{"small":1}` || len(got[2]) != 100<<10) {
				t.Fatalf("the records around it: %q, %d bytes", got[0], len(got[2]))
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.acked) != 3 {
				t.Fatalf("acked %v", f.acked)
			}
		})
	}
}

// TestAFailedConsumerEndsTheStreamWithItsReason: the consumer reports a terminal error;
// what was delivered before it reaches the client, and the stream ends with the reason in
// its Stream-Error trailer (an end of topic has none).
func TestAFailedConsumerEndsTheStreamWithItsReason(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10), endErr: errors.New("pulsar: consumer failed: the subscription was deleted")}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	resp, rd := get(t, url+"/v1/streams/s")
	f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: []byte("before")}
	close(f.feed)
	if rec, err := rd.Next(); err != nil || string(rec) != "before" {
		t.Fatalf("%q %v", rec, err)
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the failure: %v", err)
	}
	if got := resp.Trailer.Get("Stream-Error"); !strings.Contains(got, "the subscription was deleted") {
		t.Fatalf("Stream-Error trailer %q", got)
	}
}

// retryObs records what egress reports of redeliveries.
type retryObs struct {
	nopObserver
	mu     sync.Mutex
	causes []string
}

func (o *retryObs) DeadLettered(stream string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.causes = append(o.causes, fmt.Sprintf("dead/%v", ok))
}

func (o *retryObs) Nacked(stream, cause string, deliveries uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.causes = append(o.causes, fmt.Sprintf("%s/%d", cause, deliveries))
}

// TestNackRedeliversAfterABackoffThatGrowsWithTheCount: POST /nack sends each message
// back with the delay its redelivery count calls for (within the jitter); ids the stream
// does not hold are named in a 400; an acknowledgement timeout is a failed attempt too.
func TestNackRedeliversAfterABackoffThatGrowsWithTheCount(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n    ackTimeout: 50ms\n" +
		"    retry: {initial: 1s, multiplier: 2, jitter: 0.1, max: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	obs := &retryObs{}
	s := New(f, nil, obs, nil)
	s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	resp, rd := get(t, hs.URL+"/v1/streams/s")
	// Delivered before 0, 1 and 5 times: delays 1 s, 2 s, and 32 s capped at 5 s.
	counts := map[string]uint32{"1:0:-1:-1": 0, "1:1:-1:-1": 1, "1:2:-1:-1": 5}
	for _, id := range []string{"1:0:-1:-1", "1:1:-1:-1", "1:2:-1:-1"} {
		f.feed <- &Delivery{ID: id, Payload: []byte(`{}`), Redeliveries: counts[id]}
	}
	for range counts {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	post := func(ids ...string) (int, map[string]any) {
		body, _ := json.Marshal(ids)
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/streams/s/nack", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var ans map[string]any
		_ = json.NewDecoder(r.Body).Decode(&ans)
		return r.StatusCode, ans
	}
	if status, ans := post("1:0:-1:-1", "1:1:-1:-1"); status != 200 || ans["nacked"] != float64(2) {
		t.Fatalf("nack: %d %v", status, ans)
	}
	if status, ans := post("1:0:-1:-1", "9:9:-1:-1"); status != 400 || ans["nacked"] != float64(0) || fmt.Sprint(ans["unknown"]) != "[1:0:-1:-1 9:9:-1:-1]" {
		t.Fatalf("nacking ids the stream no longer holds: %d %v", status, ans)
	}
	// The third is never acknowledged: its timeout sends it back, capped at 5 s.
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.nacked)
		f.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the acknowledgement timeout never sent the message back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}
	for i, id := range f.nacked {
		if d, w := f.delays[i], want[i]; d < w*9/10 || d > w*11/10 {
			t.Errorf("%s nacked after %d deliveries waits %v, want %v ± 10%%", id, counts[id]+1, d, w)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if fmt.Sprint(obs.causes) != "[nack/1 nack/2 ack_timeout/6]" {
		t.Fatalf("observed %v", obs.causes)
	}
}

// TestAnAckClientStreamKeepsNoPayloadItWrote: what awaits a client's ack is held by id
// and handle only, so maxUnacked large messages do not stay in memory.
func TestAnAckClientStreamKeepsNoPayloadItWrote(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	s, url := serveStreamsOn(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n")
	resp, rd := get(t, url+"/v1/streams/s")
	c, whole := newChunked(3, 100<<10)
	f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"small":1}`)}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Payload: bytes.Repeat([]byte("z"), 200<<10)}
	f.feed <- &Delivery{ID: "1:2:-1:-1", Body: c.r, Size: int64(len(whole))}
	for range 3 {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	sm := s.open[resp.Header.Get("Stream-Id")]
	s.mu.Unlock()
	if sm == nil {
		t.Fatal("no open stream")
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.unacked) != 3 {
		t.Fatalf("%d unacknowledged", len(sm.unacked))
	}
	for id, e := range sm.unacked {
		if e.d.Payload != nil || e.d.Body != nil {
			t.Errorf("%s awaits its ack with its payload held (%d bytes)", id, e.d.Len())
		}
	}
}

// TestMaxDeliveriesDeadLettersAndAFailedPublicationLeavesTheMessage: a message nacked on
// its maxDeliveries-th delivery goes to <topic>-<subscription>-DLQ and is acknowledged;
// when that publication fails it is nacked instead (redelivered, never lost); a message
// that arrives already delivered maxDeliveries times (its clients died on it) is
// dead-lettered without being written.
func TestMaxDeliveriesDeadLettersAndAFailedPublicationLeavesTheMessage(t *testing.T) {
	f := &dlqSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, dlqFails: 1}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    envelope: json\n" +
		"    retry: {maxDeliveries: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	obs := &retryObs{}
	s := New(f, nil, obs, nil)
	s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	resp, rd := get(t, hs.URL+"/v1/streams/s")
	topic := "persistent://public/default/t-partition-1"
	f.feed <- &Delivery{ID: "1:0:1:-1", Topic: topic, Payload: []byte(`{}`), Redeliveries: 2} // third delivery
	f.feed <- &Delivery{ID: "1:1:1:-1", Topic: topic, Payload: []byte(`{}`), Redeliveries: 1} // second
	f.feed <- &Delivery{ID: "1:2:1:-1", Topic: topic, Payload: []byte(`{}`), Redeliveries: 3} // never written
	f.feed <- &Delivery{ID: "1:3:1:-1", Topic: topic, Payload: []byte(`{"last":1}`)}
	var written []string
	for len(written) < 3 {
		rec, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		var env struct{ MessageID string }
		_ = json.Unmarshal(rec, &env)
		written = append(written, env.MessageID)
	}
	if fmt.Sprint(written) != "[1:0:1:-1 1:1:1:-1 1:3:1:-1]" {
		t.Fatalf("written %v", written)
	}
	nack := func(ids ...string) map[string]any {
		body, _ := json.Marshal(ids)
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/streams/s/nack", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var ans map[string]any
		_ = json.NewDecoder(r.Body).Decode(&ans)
		return ans
	}
	// 1:2 goes to the stream's dead-letter goroutine, which publishes it after the
	// records written: wait until its (failing) publication is done, so the nack below
	// meets a reachable dead-letter topic whatever the scheduling.
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		handled := slices.Contains(f.nacked, "1:2:1:-1")
		f.mu.Unlock()
		if handled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the set-aside message 1:2 was never handed to the dead-letter topic")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ans := nack("1:0:1:-1", "1:1:1:-1")
	f.mu.Lock()
	defer f.mu.Unlock()
	// 1:2 arrived first of the dead ones: its publication failed, so it was nacked; 1:0
	// was dead-lettered and acknowledged; 1:1 (second delivery) was nacked.
	want := "dlq [1:0:1:-1@persistent://public/default/t-bridge-s-DLQ] acked [1:0:1:-1] nacked [1:2:1:-1 1:1:1:-1]"
	if got := fmt.Sprintf("dlq %v acked %v nacked %v", f.dead, f.acked, f.nacked); got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
	if ans["nacked"] != float64(2) || ans["deadLettered"] != float64(1) {
		t.Fatalf("nack answer %v", ans)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if fmt.Sprint(obs.causes) != "[dead/false dead/true nack/2]" {
		t.Fatalf("observed %v", obs.causes)
	}
}

// cumSub is a fakeSub that acknowledges cumulatively too.
type cumSub struct {
	*fakeSub
	cumulative []string // last@covered
}

func (f *cumSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *cumSub) AckCumulative(last *Delivery, covered []*Delivery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, d := range covered {
		ids = append(ids, d.ID)
	}
	f.cumulative = append(f.cumulative, last.ID+"@"+strings.Join(ids, ","))
	return nil
}

// TestAcksByPosition: an envelope=none client acknowledges records by their position in
// the response, individually or through=N. On an Exclusive subscription through=N is one
// cumulative acknowledgement, unless an earlier message of the partition awaits a
// redelivery (it would be acknowledged without the client having processed it): then the
// records are acknowledged one by one. Positions not awaiting an ack are refused.
func TestAcksByPosition(t *testing.T) {
	f := &cumSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    heartbeatInterval: 1h\n    heartbeat: hb\n")
	resp, rd := get(t, url+"/v1/streams/s")
	post := func(endpoint, query, body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/streams/s/"+endpoint+query, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var ans map[string]any
		_ = json.NewDecoder(r.Body).Decode(&ans)
		return r.StatusCode, ans
	}
	for i := range 5 {
		f.feed <- &Delivery{ID: fmt.Sprintf("1:%d:-1:-1", i), Topic: "t", Payload: []byte(fmt.Sprint(i))}
	}
	for i := range 5 {
		if rec, err := rd.Next(); err != nil || string(rec) != fmt.Sprint(i) {
			t.Fatalf("record %d: %q %v", i, rec, err)
		}
	}
	if st, ans := post("ack", "", `[1, "1:3:-1:-1"]`); st != 200 || ans["acked"] != float64(2) {
		t.Fatalf("ack [1, id]: %d %v", st, ans)
	}
	if st, ans := post("ack", "", `[1, 7]`); st != 400 || fmt.Sprint(ans["unknown"]) != "[1 7]" {
		t.Fatalf("acking positions acknowledged already or never written: %d %v", st, ans)
	}
	// A query the bridge cannot read exactly acknowledges nothing (1:2 is acked through=2 below).
	for _, q := range []string{"?through=2&through=4", "?thru=2", "?through=2&x=1", "?through=%zz"} {
		if st, ans := post("ack", q, ""); st != 400 || ans["error"] == nil {
			t.Fatalf("ack %s: %d %v; want 400 naming the problem", q, st, ans)
		}
		if st, _ := post("nack", q, `[2]`); st != 400 {
			t.Fatalf("nack %s: %d; want 400", q, st)
		}
	}
	if st, ans := post("ack", "?through=2", ""); st != 200 || ans["acked"] != float64(2) || ans["cumulative"] != float64(1) {
		t.Fatalf("ack through=2: %d %v", st, ans)
	}
	if st, ans := post("nack", "", `[4]`); st != 200 || ans["nacked"] != float64(1) {
		t.Fatalf("nack [4]: %d %v", st, ans)
	}
	f.feed <- &Delivery{ID: "1:5:-1:-1", Topic: "t", Payload: []byte("5")}
	if rec, err := rd.Next(); err != nil || string(rec) != "5" {
		t.Fatalf("record 5: %q %v", rec, err)
	}
	// 1:4 awaits its redelivery: a cumulative ack through 1:5 would take it too.
	if st, ans := post("ack", "?through=5", ""); st != 200 || ans["acked"] != float64(1) || ans["cumulative"] != float64(0) {
		t.Fatalf("ack through=5: %d %v", st, ans)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	got := fmt.Sprintf("acked %v cumulative %v nacked %v", f.acked, f.cumulative, f.nacked)
	if want := "acked [1:1:-1:-1 1:3:-1:-1 1:5:-1:-1] cumulative [1:2:-1:-1@1:0:-1:-1,1:2:-1:-1] nacked [1:4:-1:-1]"; got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

// TestRedeliveryCountByPosition: a client reading bare payloads asks GET <path>/ack for
// the redelivery count of the records it holds, by position.
func TestRedeliveryCountByPosition(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n")
	resp, rd := get(t, url+"/v1/streams/s")
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "t", Payload: []byte("a")}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "t", Payload: []byte("b"), Redeliveries: 2}
	for range 2 {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s/ack?positions=0,1,9", nil)
	req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	want := `"records":[{"position":0,"messageId":"1:0:-1:-1","redeliveryCount":0},{"position":1,"messageId":"1:1:-1:-1","redeliveryCount":2}],"status":200,"unknown":["9"]`
	if r.StatusCode != 200 || !strings.Contains(string(b), want) {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
}

// TestAckBodiesAreBoundedInCount: an /ack or /nack body names at most maxAckIDs ids or
// positions; a body of millions of empty records or zeros (16 MiB of them cost the
// bridge some 400 MB before) is refused with a clear error before they are collected.
func TestAckBodiesAreBoundedInCount(t *testing.T) {
	for _, tc := range []struct {
		name, ctype string
		body        func(n int) string
	}{
		{"recordio", "application/recordio", func(n int) string { return strings.Repeat("1\n0", n) }},
		{"json", "application/json", func(n int) string { return "[" + strings.Repeat("0,", n-1) + "0]" }},
	} {
		const limit = 10000 // maxAckIDs
		for _, n := range []int{limit, limit + 1, 4 << 20} {
			req := httptest.NewRequest(http.MethodPost, "/v1/streams/s/ack", strings.NewReader(tc.body(n)))
			req.Header.Set("Content-Type", tc.ctype)
			ids, err := readIDs(req)
			if n <= limit {
				if err != nil || len(ids) != n || ids[0] != "0" {
					t.Errorf("%s, %d ids: %d read, %v", tc.name, n, len(ids), err)
				}
				continue
			}
			if err == nil || ids != nil || !strings.Contains(err.Error(), "more than 10000 ids") {
				t.Errorf("%s, %d ids: %d read, %v; want errTooManyIDs", tc.name, n, len(ids), err)
			}
		}
	}
	// The longest ids, 10 000 of them, fit; one huge string, or a body over 1 MiB, does not.
	longest := "9223372036854775807:9223372036854775807:2147483647:2147483647"
	for _, tc := range []struct {
		ctype, body string
		ok          bool
	}{
		{"application/json", "[" + strings.Repeat(`"`+longest+`",`, 9999) + `"` + longest + `"]`, true},
		{"application/recordio", strings.Repeat(fmt.Sprintf("%d\n%s", len(longest), longest), 10000), true},
		{"application/json", `["` + strings.Repeat("x", 2<<20) + `"]`, false},
		{"application/json", "[" + strings.Repeat(" ", 2<<20) + "1]", false},
		{"application/recordio", strings.Repeat("200\n"+strings.Repeat("x", 200), 6000), false},
	} {
		req := httptest.NewRequest(http.MethodPost, "/v1/streams/s/ack", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ctype)
		ids, err := readIDs(req)
		if tc.ok && (err != nil || len(ids) != 10000 || ids[9999] != longest) {
			t.Errorf("%s body of %d bytes: %d ids, %v", tc.ctype, len(tc.body), len(ids), err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "bytes, in one request")) {
			t.Errorf("%s body of %d bytes: %d ids, %v; want the body refused as too large", tc.ctype, len(tc.body), len(ids), err)
		}
	}
	for _, body := range []string{`{"a":1}`, `[1,`, `["1:2:3:4", {"x":1}]`, `[-1]`, ``} {
		req := httptest.NewRequest(http.MethodPost, "/v1/streams/s/ack", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if ids, err := readIDs(req); err == nil {
			t.Errorf("%s: %v accepted", body, ids)
		}
	}
}

// slowDLQSub dead-letters after a delay (a broker creating the dead-letter topic's
// producer), failing if the request's context ends first.
type slowDLQSub struct {
	*dlqSub
	delay time.Duration
}

func (f *slowDLQSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *slowDLQSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	t := time.NewTimer(f.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return f.dlqSub.DeadLetter(ctx, d, topic)
}

// TestNackDeadLettersSlowerThanTheBodyGrace: a /nack whose dead-lettering takes longer
// than the grace given to drop a body's rest (200 ms) still dead-letters. The grace's
// read deadline stayed on the connection after the body was dropped, so net/http's
// background read failed at it and cancelled the request's context under the
// publication: the message was nacked instead, and came back to fail the same way.
func TestNackDeadLettersSlowerThanTheBodyGrace(t *testing.T) {
	f := &slowDLQSub{dlqSub: &dlqSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}, delay: time.Second}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    envelope: json\n" +
		"    retry: {maxDeliveries: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(f, nil, nil, nil)
	s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	resp, rd := get(t, hs.URL+"/v1/streams/s")
	f.feed <- &Delivery{ID: "1:0:1:-1", Topic: "persistent://public/default/t", Payload: []byte(`{}`)}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/streams/s/nack", strings.NewReader(`["1:0:1:-1"]`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var ans map[string]any
	_ = json.NewDecoder(r.Body).Decode(&ans)
	if r.StatusCode != http.StatusOK || ans["deadLettered"] != float64(1) {
		t.Fatalf("nack answer %d %v: want the message dead-lettered", r.StatusCode, ans)
	}
}
