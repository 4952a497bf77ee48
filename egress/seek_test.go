package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// seekSub is a fakeSub that can be moved: a seek drops what its feed still holds (the
// consumer's queue) and records the seek, the options of the last Subscribe, and what
// had been acknowledged when the seek came.
type seekSub struct {
	*fakeSub
	smu         sync.Mutex
	seeks       []string // time or topic/id
	ackedAtSeek []string
	opts        SubscribeOptions
	fail        error
}

func (f *seekSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	f.smu.Lock()
	f.opts = o
	f.smu.Unlock()
	return f, nil
}

func (f *seekSub) record(what string) error {
	f.mu.Lock()
	acked := slices.Clone(f.acked)
	f.mu.Unlock()
	f.smu.Lock()
	defer f.smu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.seeks = append(f.seeks, what)
	f.ackedAtSeek = acked
	for len(f.feed) > 0 {
		<-f.feed
	}
	return nil
}

func (f *seekSub) SeekTime(ctx context.Context, t time.Time) error {
	return f.record(t.UTC().Format(time.RFC3339))
}

func (f *seekSub) SeekID(ctx context.Context, topic, id string) error {
	return f.record(topic + "/" + id)
}

// postSeek posts body to a stream's /seek.
func postSeek(t *testing.T, url, sid, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stream-Id", sid)
	c := &http.Client{Timeout: 10 * time.Second}
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(r.Body).Decode(&m)
	return r.StatusCode, m
}

func TestSeekMovesALiveStreamWhoseOutstandingIDsBecomeUnknown(t *testing.T) {
	f := &seekSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n")
	f.feed <- &Delivery{ID: "1:0:-1:-1", Payload: []byte("old-0")}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Payload: []byte("old-1")}
	resp, rd := get(t, url+"/v1/streams/s")
	sid := resp.Header.Get("Stream-Id")
	for _, want := range []string{"old-0", "old-1"} {
		if rec, err := rd.Next(); err != nil || string(rec) != want {
			t.Fatalf("%q %v, want %q", rec, err, want)
		}
	}
	// The stream waits for a message when the seek comes: the seek must not wait for one.
	st, m := postSeek(t, url+"/v1/streams/s/seek", sid, `{"time":"2026-12-06T10:00:00Z"}`)
	if st != 200 || m["stale"] != float64(2) {
		t.Fatalf("seek: %d %v, want 200 with 2 stale ids", st, m)
	}
	f.smu.Lock()
	seeks := slices.Clone(f.seeks)
	f.smu.Unlock()
	if len(seeks) != 1 || seeks[0] != "2026-12-06T10:00:00Z" {
		t.Fatalf("seeks %v", seeks)
	}
	f.feed <- &Delivery{ID: "0:5:-1:-1", Payload: []byte("replayed")}
	if rec, err := rd.Next(); err != nil || string(rec) != "replayed" {
		t.Fatalf("after the seek the same response gave %q %v, want the replayed record", rec, err)
	}
	// What the client held before the move is neither acknowledged nor acknowledgeable.
	if st, m := postIDs(t, url+"/v1/streams/s/ack", sid, "1:0:-1:-1"); st != 400 || !slices.Contains(anySlice(m["unknown"]), "1:0:-1:-1") {
		t.Fatalf("ack of an id delivered before the seek: %d %v, want 400 naming it unknown", st, m)
	}
	if st, m := postIDs(t, url+"/v1/streams/s/ack", sid, "0:5:-1:-1"); st != 200 || m["acked"] != float64(1) {
		t.Fatalf("ack of the replayed id: %d %v", st, m)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.acked, []string{"0:5:-1:-1"}) || len(f.nacked) != 0 {
		t.Fatalf("acked %v nacked %v: the move acknowledged or nacked what the client held", f.acked, f.nacked)
	}
}

func anySlice(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestSeekOnAnAutoAckStreamAcknowledgesWhatWasWrittenBeforeTheMove(t *testing.T) {
	// A busy stream: its consumer always has a message at hand, so records are written
	// and not yet flushed (nor acknowledged) when the seek comes between two of them.
	const n = 200000
	f := &seekSub{fakeSub: &fakeSub{feed: make(chan *Delivery, n)}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	for i := range n {
		f.feed <- &Delivery{ID: fmt.Sprintf("1:%d:-1:-1", i), Payload: []byte("r")}
	}
	resp, rd := get(t, url+"/v1/streams/s")
	read := make(chan int, 1)
	first := make(chan struct{})
	go func() {
		k := 0
		for {
			if _, err := rd.Next(); err != nil {
				read <- k
				return
			}
			if k++; k == 1 {
				close(first)
			}
		}
	}()
	// The seek comes once records flow: sent as soon as the answer's head arrives, it
	// could be taken before the first record was written, with nothing to acknowledge.
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("no record within 10s")
	}
	if st, m := postSeek(t, url+"/v1/streams/s/seek", resp.Header.Get("Stream-Id"), `{"messageId":"0:1:-1:-1"}`); st != 200 {
		t.Fatalf("seek: %d %v", st, m)
	}
	time.Sleep(100 * time.Millisecond) // what the stream acknowledges after the seek, if anything
	resp.Body.Close()
	<-read
	f.smu.Lock()
	atSeek := len(f.ackedAtSeek)
	f.smu.Unlock()
	f.mu.Lock()
	all := len(f.acked)
	f.mu.Unlock()
	// Acknowledged after the seek, an id inside the replayed range would be skipped by it.
	if atSeek == 0 || atSeek == n || all != atSeek {
		t.Fatalf("%d records acknowledged when the seek came, %d in all (of %d): every record written before the seek is acknowledged before it, none after",
			atSeek, all, n)
	}
}

func TestSeekIsRefusedOnASharedSubscriptionUnlessTheStreamAllowsIt(t *testing.T) {
	for _, allow := range []bool{false, true} {
		f := &seekSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
		doc := "streams:\n  - name: s\n    topics: [t]\n    type: key_shared\n"
		if allow {
			doc += "    allowSeekShared: true\n"
		}
		url := serveStreams(t, f, doc)
		resp, _ := get(t, url+"/v1/streams/s")
		st, m := postSeek(t, url+"/v1/streams/s/seek", resp.Header.Get("Stream-Id"), `{"time":"2026-12-06T10:00:00Z"}`)
		if allow && st != 200 || !allow && (st != 409 || !strings.Contains(m["error"].(string), "allowSeekShared")) {
			t.Fatalf("allowSeekShared %v: %d %v", allow, st, m)
		}
		resp.Body.Close()
	}
}

func TestSeekBodiesAndStreamIDsAreCheckedAndNamed(t *testing.T) {
	f := &seekSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t, u]\n  - name: other\n    topics: [t]\n")
	resp, _ := get(t, url+"/v1/streams/s")
	sid := resp.Header.Get("Stream-Id")
	for _, c := range []struct{ body, named string }{
		{`{"time":"yesterday"}`, "yesterday"},
		{`{"time":"2026-12-06 10:00"}`, "2026-12-06 10:00"},
		{`{"messageId":"1:2:3"}`, "1:2:3"},
		{`{"messageId":"1:x:-1:-1","topic":"t"}`, "x"},
		{`{"messageId":"1:2:-1:-1"}`, "names no topic"},
		{`{"messageId":"1:2:-1:-1","topic":"elsewhere"}`, "elsewhere"},
		{`{"time":"2026-12-06T10:00:00Z","messageId":"1:2:-1:-1"}`, "exactly one"},
		{`{"when":"now"}`, "when"},
		{`[1]`, "[1]"},
	} {
		st, m := postSeek(t, url+"/v1/streams/s/seek", sid, c.body)
		if msg, _ := m["error"].(string); st != 400 || !strings.Contains(msg, c.named) {
			t.Errorf("%s: %d %v, want 400 naming %q", c.body, st, m, c.named)
		}
	}
	if st, _ := postSeek(t, url+"/v1/streams/s/seek", "nosuchstream", `{"time":"2026-12-06T10:00:00Z"}`); st != 409 {
		t.Errorf("a Stream-Id no stream has open: %d, want 409 as /ack answers it", st)
	}
	if st, _ := postSeek(t, url+"/v1/streams/other/seek", sid, `{"time":"2026-12-06T10:00:00Z"}`); st != 404 {
		t.Errorf("another stream's Stream-Id: %d, want 404 as /ack answers it", st)
	}
	if st, m := postSeek(t, url+"/v1/streams/s/seek", sid, `{"messageId":"1:2:-1:-1","topic":"u"}`); st != 200 {
		t.Errorf("an id with one of the stream's topics: %d %v", st, m)
	}
	f.smu.Lock()
	defer f.smu.Unlock()
	if !slices.Equal(f.seeks, []string{"persistent://public/default/u/1:2:-1:-1"}) {
		t.Errorf("seeks %v: only the valid one goes to the subscription", f.seeks)
	}
}

func TestPositionQueryTakesATimeOrAnIDAppliedBySeek(t *testing.T) {
	f := &seekSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    overrides: [position]\n")
	get(t, url+"/v1/streams/s?position=2026-12-06T10:00:00Z")
	f.smu.Lock()
	o := f.opts
	f.smu.Unlock()
	if !o.StartTime.Equal(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)) || o.StartMessageID != "" || o.Position != "latest" {
		t.Fatalf("subscribe options %+v", o)
	}
	get(t, url+"/v1/streams/s?position=id:12:3:-1:-1")
	f.smu.Lock()
	o = f.opts
	f.smu.Unlock()
	if o.StartMessageID != "12:3:-1:-1" || !o.StartTime.IsZero() {
		t.Fatalf("subscribe options %+v", o)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s?position=id:12:3", nil)
	req.Header.Set("Accept", "application/recordio")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(r.Body).Decode(&m)
	if msg, _ := m["error"].(string); r.StatusCode != 400 || !strings.Contains(msg, "id:12:3") {
		t.Fatalf("a bad position: %d %v, want 400 naming it", r.StatusCode, m)
	}
}
