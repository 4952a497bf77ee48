package egress

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// receiptSub is a fakeSub whose confirmed acknowledgements wait for the test's answer.
type receiptSub struct {
	*fakeSub
	asked   chan []string         // the ids of each AckConfirmed
	answer  chan map[string]error // the outcome by id (absent: confirmed)
	cmu     sync.Mutex
	confirm []string
}

func (f *receiptSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *receiptSub) AckConfirmed(ctx context.Context, ds []*Delivery) []error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	f.asked <- ids
	errs := make([]error, len(ds))
	select {
	case out := <-f.answer:
		for i, d := range ds {
			errs[i] = out[d.ID]
			if errs[i] == nil {
				f.cmu.Lock()
				f.confirm = append(f.confirm, d.ID)
				f.cmu.Unlock()
			}
		}
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// TestAckAnswers200OnlyOnceTheBrokerConfirmed: with ack receipts (the default), /ack
// waits for the broker's confirmation of every id before its 200; an id the broker
// does not confirm is answered 503 in notAcked and stays unacknowledged, so posting it
// again acknowledges it. With ackReceipt: false, the 200 comes once the acknowledgement
// is queued.
func TestAckAnswers200OnlyOnceTheBrokerConfirmed(t *testing.T) {
	f := &receiptSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, asked: make(chan []string, 4), answer: make(chan map[string]error)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n")
	resp, rd := get(t, url+"/v1/streams/s")
	sid := resp.Header.Get("Stream-Id")
	for i, id := range []string{"1:0:-1:-1", "1:1:-1:-1", "1:2:-1:-1"} {
		f.feed <- &Delivery{ID: id, Payload: []byte(`{}`)}
		if _, err := rd.Next(); err != nil {
			t.Fatal(i, err)
		}
	}
	type answer struct {
		code int
		body map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		code, body := postIDs(t, url+"/v1/streams/s/ack", sid, "1:0:-1:-1", "1:1:-1:-1")
		done <- answer{code, body}
	}()
	if got := f.nextAsked(t); !slices.Equal(got, []string{"1:0:-1:-1", "1:1:-1:-1"}) {
		t.Fatalf("confirmed acknowledgement of %v", got)
	}
	select {
	case a := <-done:
		t.Fatalf("/ack answered %d %v before the broker confirmed", a.code, a.body)
	case <-time.After(100 * time.Millisecond):
	}
	f.answer <- map[string]error{"1:1:-1:-1": errors.New("the broker's cursor could not be updated")}
	a := <-done
	if a.code != http.StatusServiceUnavailable || a.body["acked"] != float64(1) || !slices.Equal(toStrings(a.body["notAcked"]), []string{"1:1:-1:-1"}) {
		t.Fatalf("/ack with one acknowledgement refused: %d %v, want 503 with notAcked [1:1:-1:-1]", a.code, a.body)
	}
	go func() {
		code, body := postIDs(t, url+"/v1/streams/s/ack", sid, "1:1:-1:-1")
		done <- answer{code, body}
	}()
	if got := f.nextAsked(t); !slices.Equal(got, []string{"1:1:-1:-1"}) {
		t.Fatalf("the id posted again: confirmed acknowledgement of %v", got)
	}
	f.answer <- nil
	if a := <-done; a.code != http.StatusOK || a.body["acked"] != float64(1) {
		t.Fatalf("posting it again: %d %v", a.code, a.body)
	}
	f.mu.Lock()
	queued := len(f.acked)
	f.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d acknowledgements were only queued on a stream with ack receipts", queued)
	}

	// ackReceipt: false: the queued acknowledgement's 200.
	g := &receiptSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, asked: make(chan []string, 4), answer: make(chan map[string]error)}
	url = serveStreams(t, g, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n    ackReceipt: false\n")
	resp, rd = get(t, url+"/v1/streams/s")
	g.feed <- &Delivery{ID: "2:0:-1:-1", Payload: []byte(`{}`)}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if code, body := postIDs(t, url+"/v1/streams/s/ack", resp.Header.Get("Stream-Id"), "2:0:-1:-1"); code != http.StatusOK || len(g.asked) != 0 {
		t.Fatalf("ackReceipt false: %d %v, %d confirmed acknowledgements asked", code, body, len(g.asked))
	}
}

// nextAsked waits for the next confirmed acknowledgement asked for.
func (f *receiptSub) nextAsked(t *testing.T) []string {
	t.Helper()
	select {
	case ids := <-f.asked:
		return ids
	case <-time.After(5 * time.Second):
		t.Fatal("/ack never asked for the broker's confirmation")
		return nil
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}
