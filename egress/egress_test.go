package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/config"
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
	closed bool
	ackErr map[string]error // Ack fails once for these ids
}

func (f *fakeSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *fakeSub) Receive(ctx context.Context) (*Delivery, error) {
	select {
	case d, ok := <-f.feed:
		if !ok {
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

func (f *fakeSub) Nack(d *Delivery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nacked = append(f.nacked, d.ID)
}

func (f *fakeSub) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func serveStreams(t *testing.T, sub Subscriber, doc string) string {
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
	s.Update(tab, Limits{MaxStreams: 10, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	e.POST("/*", s.HandleAck)
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	return hs.URL
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

// TestAckClientWithoutEnvelopeIsRefused: a client that chooses ack=client but reads bare
// payloads could never name what to acknowledge.
func TestAckClientWithoutEnvelopeIsRefused(t *testing.T) {
	def := &mapping.Stream{Name: "s", Subscription: "sub", Position: "latest", Ack: "auto", Envelope: "none", Overrides: []string{"ack", "envelope"}}
	req := httptest.NewRequest(http.MethodGet, "/v1/streams/s?ack=client", nil)
	if _, err := resolveQuery(def, req); err == nil || !strings.Contains(err.Error(), "ack=client needs envelope=json") {
		t.Fatalf("ack=client, envelope=none: %v", err)
	}
	req = httptest.NewRequest(http.MethodGet, "/v1/streams/s?ack=client&envelope=json", nil)
	if o, err := resolveQuery(def, req); err != nil || o.ack != "client" || o.envelope != "json" {
		t.Fatalf("ack=client, envelope=json: %+v %v", o, err)
	}
}
