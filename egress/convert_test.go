package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// convSub is a Subscriber that converts protobuf records to JSON by a fake rule: the
// payload quoted into a JSON object, or an error for payloads starting "bad".
type convSub struct {
	*fakeSub
	calls int
}

var errFakeConversion = errors.New("not a record of the schema")

func (c *convSub) Converts(from, to string) bool {
	return from == "application/x-protobuf" && to == "application/json"
}

func (c *convSub) Convert(_ context.Context, d *Delivery, payload []byte, from, to string) ([]byte, error) {
	c.calls++
	if strings.HasPrefix(string(payload), "bad") {
		return nil, errFakeConversion
	}
	return fmt.Appendf(nil, `{"converted":%q,"version":%q}`, payload, d.SchemaVersion), nil
}

func getAccepting(t *testing.T, url, messageAccept string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Message-Accept", messageAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const protoStream = "streams:\n  - name: s\n    topics: [t]\n    contentType: application/x-protobuf\n"

// TestEgressConvertsProtobufRecordsForAJSONClient: a stream of protobuf records serves
// Message-Accept: application/json by converting each record (with its message's schema
// version), application/x-protobuf as stored, and a type it cannot convert to is 406
// naming both types.
func TestEgressConvertsProtobufRecordsForAJSONClient(t *testing.T) {
	f := &convSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, protoStream) + "/v1/streams/s"
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "t", Payload: []byte("pb-1"), SchemaVersion: []byte{0, 7}}
	resp := getAccepting(t, url, "application/json")
	if resp.StatusCode != 200 || resp.Header.Get("Message-Content-Type") != "application/json" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("Message-Accept application/json: %d %q %s, want 200 with JSON records", resp.StatusCode, resp.Header.Get("Message-Content-Type"), b)
	}
	rec, err := recordio.NewReader(resp.Body).NextRecord()
	if err != nil || string(rec.Data) != `{"converted":"pb-1","version":"\x00\a"}` {
		t.Fatalf("record %q %v, want the converted record", rec.Data, err)
	}
	resp.Body.Close()

	f = &convSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url = serveStreams(t, f, protoStream) + "/v1/streams/s"
	f.feed <- &Delivery{ID: "1:2:-1:-1", Topic: "t", Payload: []byte("pb-2")}
	resp = getAccepting(t, url, "application/x-protobuf")
	calls := f.calls
	if resp.StatusCode != 200 || resp.Header.Get("Message-Content-Type") != "application/x-protobuf" {
		t.Fatalf("Message-Accept application/x-protobuf: %d %q", resp.StatusCode, resp.Header.Get("Message-Content-Type"))
	}
	if rec, err := recordio.NewReader(resp.Body).NextRecord(); err != nil || string(rec.Data) != "pb-2" || f.calls != calls {
		t.Fatalf("record %q %v (%d conversions), want pb-2 as stored", rec.Data, err, f.calls-calls)
	}
	resp.Body.Close()

	resp = getAccepting(t, url, "text/plain")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotAcceptable || !strings.Contains(string(b), "text/plain") || !strings.Contains(string(b), "application/x-protobuf") {
		t.Fatalf("Message-Accept text/plain: %d %s, want 406 naming text/plain and application/x-protobuf", resp.StatusCode, b)
	}
}

// TestEgressEndsAStreamOnARecordItCannotConvert: without a dead-letter topic, a record
// that does not convert ends the stream with the reason in its Stream-Error trailer and
// is delivered again, instead of being skipped or written unconverted.
func TestEgressEndsAStreamOnARecordItCannotConvert(t *testing.T) {
	f := &convSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	url := serveStreams(t, f, protoStream) + "/v1/streams/s"
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "t", Payload: []byte("pb-1"), SchemaVersion: []byte{1}}
	f.feed <- &Delivery{ID: "1:2:-1:-1", Topic: "t", Payload: []byte("bad"), SchemaVersion: []byte{1}}
	resp := getAccepting(t, url, "application/json")
	r := recordio.NewReader(resp.Body)
	if rec, err := r.NextRecord(); err != nil || !strings.Contains(string(rec.Data), "pb-1") {
		t.Fatalf("first record %q %v", rec.Data, err)
	}
	if rec, err := r.NextRecord(); err != io.EOF {
		t.Fatalf("after the unconvertible record: %q %v, want the end of the stream", rec.Data, err)
	}
	if tr := resp.Trailer.Get("Stream-Error"); !strings.Contains(tr, "1:2:-1:-1") || !strings.Contains(tr, errFakeConversion.Error()) {
		t.Fatalf("Stream-Error trailer %q, want the message and the reason", tr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nacked) != 1 || f.nacked[0] != "1:2:-1:-1" {
		t.Fatalf("nacked %v, want the unconverted message", f.nacked)
	}
}

// A record above maxConvertBytes is not read or converted: with a dead-letter topic it
// is set aside there as stored, the records after it delivered converted.
func TestEgressDoesNotConvertARecordAboveTheBound(t *testing.T) {
	f := &convSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	d := &dlqConvSub{convSub: f}
	url := serveStreams(t, d, protoStream+"    type: shared\n    retry: {maxDeliveries: 3}\n") + "/v1/streams/s"
	big := &Delivery{ID: "1:1:-1:-1", Topic: "t", Body: strings.NewReader(strings.Repeat("x", maxConvertBytes+1)), Size: maxConvertBytes + 1}
	f.feed <- big
	f.feed <- &Delivery{ID: "1:2:-1:-1", Topic: "t", Payload: []byte("pb-2")}
	resp := getAccepting(t, url, "application/json")
	rec, err := recordio.NewReader(resp.Body).NextRecord()
	if err != nil || string(rec.Data) != `{"converted":"pb-2","version":""}` {
		t.Fatalf("record %q %v, want the second record converted", rec.Data, err)
	}
	deadline := time.Now().Add(10 * time.Second) // the stream's dead-letter goroutine publishes it
	for {
		d.mu.Lock()
		n := len(d.dead)
		d.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if f.calls != 1 || len(d.dead) != 1 || d.dead[0] != "1:1:-1:-1" {
		t.Fatalf("%d conversions, dead-lettered %v: want only the small one converted and the large one dead-lettered", f.calls, d.dead)
	}
	if !errors.Is(big.Undecodable, ErrTooLargeToConvert) {
		t.Fatalf("the large record's reason: %v", big.Undecodable)
	}
}

// dlqConvSub converts and dead-letters.
type dlqConvSub struct {
	*convSub
	dead []string
}

func (d *dlqConvSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return d, nil
}

func (d *dlqConvSub) DeadLetter(ctx context.Context, m *Delivery, topic string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = append(d.dead, m.ID)
	return nil
}
