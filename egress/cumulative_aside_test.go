package egress

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// frozenDLQCumSub acknowledges cumulatively and has a dead-letter topic that never answers.
type frozenDLQCumSub struct {
	*cumSub
	entered chan struct{}
}

func (f *frozenDLQCumSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *frozenDLQCumSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	f.entered <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestACumulativeAckDoesNotCoverAMessageWhoseDeadLetteringFailed: on an Exclusive
// subscription with a dead-letter topic, a message the consumer cannot decode goes to
// the stream's dead-letter goroutine, which cannot publish it and sends it back for
// redelivery. The client then acknowledges a later message through=N: the stream must
// not make that one cumulative acknowledgement, which would acknowledge the message set
// aside unpublished, so it never reached the dead-letter topic.
func TestACumulativeAckDoesNotCoverAMessageWhoseDeadLetteringFailed(t *testing.T) {
	withDeadLetterTimeout(t, 100*time.Millisecond)
	f := &frozenDLQCumSub{cumSub: &cumSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}}, entered: make(chan struct{}, 10)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: exclusive\n    ack: client\n    ackTimeout: 1h\n"+
		"    heartbeatInterval: 1h\n    heartbeat: hb\n    retry: {deadLetterTopic: dlq}\n")
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "t", Payload: []byte("stored"), Undecodable: errors.New("does not decompress")}
	<-f.entered // set aside; its dead-lettering fails in 100 ms
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.nacked)
		f.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed dead-lettering never sent the message back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "t", Payload: []byte("1")}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/streams/s/ack?through=1", strings.NewReader(""))
	req.Header.Set("Stream-Id", resp.Header.Get("Stream-Id"))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ans map[string]any
	_ = json.NewDecoder(r.Body).Decode(&ans)
	r.Body.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cumulative) > 0 {
		t.Fatalf("answer %v: cumulative acknowledgement %v covers 1:0:-1:-1, sent back for redelivery (nacked %v) after its dead-lettering failed", ans, f.cumulative, f.nacked)
	}
}
