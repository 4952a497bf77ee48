package egress

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// copierSub is a fakeSub that implements PayloadCopier and logs, in order, each
// Copied and each acknowledgement.
type copierSub struct {
	*fakeSub
	mu     sync.Mutex
	events []string
}

func (f *copierSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *copierSub) Copied(d *Delivery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "copied "+d.ID)
}

func (f *copierSub) Ack(d *Delivery) error {
	f.mu.Lock()
	f.events = append(f.events, "ack "+d.ID)
	f.mu.Unlock()
	return f.fakeSub.Ack(d)
}

// TestAMessageTheFilterLeavesOutIsCopiedBeforeItIsAcknowledged: the stream tells the
// subscription it reads a filtered message's payload no more (Copied) before it
// acknowledges it, so the frame it came in can be reused once its siblings are written
// and settled: without it, one message left out of a batch kept the batch's frame from
// ever going back.
func TestAMessageTheFilterLeavesOutIsCopiedBeforeItIsAcknowledged(t *testing.T) {
	f := &copierSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}
	_, url := filterServer(t, f, &countingObs{}, "streams:\n  - name: s\n    topics: [t]\n    filter:\n      match:\n        - json: {kind: [keep]}\n")
	f.feed <- &Delivery{ID: "1:0:-1:0", Payload: []byte(`{"kind":"drop"}`)}
	f.feed <- &Delivery{ID: "1:0:-1:1", Payload: []byte(`{"kind":"keep"}`)}
	f.feed <- &Delivery{ID: "1:0:-1:2", Payload: []byte(`{"kind":"drop"}`)}
	_, rd := get(t, url+"/v1/streams/s")
	if rec, err := rd.Next(); err != nil || string(rec) != `{"kind":"keep"}` {
		t.Fatalf("first record %q, %v", rec, err)
	}
	// Each message is Copied, and before its acknowledgement.
	ids := []string{"1:0:-1:0", "1:0:-1:1", "1:0:-1:2"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		got := slices.Clone(f.events)
		f.mu.Unlock()
		ok := true
		for _, id := range ids {
			c, a := slices.Index(got, "copied "+id), slices.Index(got, "ack "+id)
			ok = ok && c >= 0 && a > c
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %q, want each of %q copied, then acknowledged", got, ids)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
