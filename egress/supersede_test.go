package egress

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// settlingSub is a fakeSub that, like the bridge's subscription, holds each delivery
// until it is settled (acknowledged, nacked or released), and can acknowledge
// cumulatively; cumulative acknowledgements wait for gate (when set) and then fail with
// cumErr (when set).
type settlingSub struct {
	*fakeSub
	smu      sync.Mutex
	held     map[*Delivery]bool
	released []*Delivery
	gate     chan struct{}
	entered  chan struct{}
	cumErr   error
}

func newSettlingSub() *settlingSub {
	return &settlingSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, held: map[*Delivery]bool{}}
}

func (f *settlingSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

// deliver feeds d and holds it, as the subscription charges a delivery it hands out.
func (f *settlingSub) deliver(d *Delivery) {
	f.smu.Lock()
	f.held[d] = true
	f.smu.Unlock()
	f.feed <- d
}

func (f *settlingSub) settle(d *Delivery) {
	f.smu.Lock()
	delete(f.held, d)
	f.smu.Unlock()
}

func (f *settlingSub) Ack(d *Delivery) error {
	f.settle(d)
	return f.fakeSub.Ack(d)
}

func (f *settlingSub) Nack(d *Delivery, after time.Duration) {
	f.settle(d)
	f.fakeSub.Nack(d, after)
}

func (f *settlingSub) Release(d *Delivery) {
	f.smu.Lock()
	f.released = append(f.released, d)
	f.smu.Unlock()
	f.settle(d)
}

func (f *settlingSub) AckCumulative(last *Delivery, covered []*Delivery) error {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	if f.cumErr != nil {
		return f.cumErr // settles nothing, as the subscription's does on failure
	}
	for _, d := range covered {
		f.settle(d)
	}
	return nil
}

// unsettled lists the ids of the deliveries still held.
func (f *settlingSub) unsettled() []string {
	f.smu.Lock()
	defer f.smu.Unlock()
	var ids []string
	for d := range f.held {
		ids = append(ids, d.ID)
	}
	return ids
}

// TestADeliverySupersededByItsRedeliveryIsReleased: a message written and not yet
// acknowledged comes again (the broker redelivers what a reconnected consumer had not
// acknowledged); the first delivery is released, and once the client acknowledges
// every id nothing is held. The first delivery used to stay held until the stream
// ended: its budget charge never went back, and the stream was never idle again.
func TestADeliverySupersededByItsRedeliveryIsReleased(t *testing.T) {
	f := newSettlingSub()
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    ack: client\n    envelope: json\n")
	resp, rd := get(t, url+"/v1/streams/s")
	first := &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`)}
	f.deliver(first)
	f.deliver(&Delivery{ID: "1:1:-1:-1", Payload: []byte(`{"n":1}`)})
	again := &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`), Redeliveries: 1}
	f.deliver(again)
	for range 3 {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if st, m := postIDs(t, url+"/v1/streams/s/ack", resp.Header.Get("Stream-Id"), "1:0:-1:-1", "1:1:-1:-1"); st != 200 || m["acked"] != float64(2) {
		t.Fatalf("ack: %d %v", st, m)
	}
	if left := f.unsettled(); len(left) > 0 {
		t.Fatalf("every id acknowledged, yet deliveries of %v are still held", left)
	}
	f.smu.Lock()
	defer f.smu.Unlock()
	if len(f.released) != 1 || f.released[0] != first {
		t.Fatalf("released %v: want the first delivery of 1:0:-1:-1 only", f.released)
	}
}

// TestAFailedCumulativeAckReleasesWhatWasDeliveredAgain: through=N on an exclusive
// stream fails on the broker while the message it covered is delivered again; the
// entry of the redelivery stays (the client acknowledges it later) and the earlier
// delivery, which the failed acknowledgement did not settle, is released.
func TestAFailedCumulativeAckReleasesWhatWasDeliveredAgain(t *testing.T) {
	f := newSettlingSub()
	f.gate, f.entered = make(chan struct{}), make(chan struct{}, 1)
	f.cumErr = errors.New("connection closed")
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: exclusive\n    ack: client\n    envelope: json\n")
	resp, rd := get(t, url+"/v1/streams/s")
	sid := resp.Header.Get("Stream-Id")
	first := &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`)}
	f.deliver(first)
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	answer := make(chan int, 1)
	go func() {
		st, _ := postIDs(t, url+"/v1/streams/s/ack?through=0", sid)
		answer <- st
	}()
	<-f.entered // the acknowledgement is on its way to the broker
	f.deliver(&Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`), Redeliveries: 1})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	close(f.gate)
	if st := <-answer; st != http.StatusServiceUnavailable {
		t.Fatalf("a failed cumulative acknowledgement answered %d, want 503", st)
	}
	f.smu.Lock()
	released := append([]*Delivery(nil), f.released...)
	f.smu.Unlock()
	if len(released) != 1 || released[0] != first {
		t.Fatalf("released %v: want the first delivery, superseded while its acknowledgement failed", released)
	}
	f.cumErr = nil
	if st, m := postIDs(t, url+"/v1/streams/s/ack", sid, "1:0:-1:-1"); st != 200 || m["acked"] != float64(1) {
		t.Fatalf("ack of the redelivery: %d %v", st, m)
	}
	if left := f.unsettled(); len(left) > 0 {
		t.Fatalf("every id acknowledged, yet deliveries of %v are still held", left)
	}
}

// postIDs posts ids (a JSON array; none: an empty body) to an ack or nack URL.
func postIDs(t *testing.T, url, sid string, ids ...string) (int, map[string]any) {
	t.Helper()
	body := ""
	if len(ids) > 0 {
		body = `["` + strings.Join(ids, `","`) + `"]`
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Stream-Id", sid)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(r.Body).Decode(&m)
	return r.StatusCode, m
}

// settlingDLQSub is a settlingSub that dead-letters.
type settlingDLQSub struct {
	*settlingSub
	dmu  sync.Mutex
	dead []string
}

func (f *settlingDLQSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *settlingDLQSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	f.dead = append(f.dead, d.ID)
	return nil
}

// TestARedeliveryPastMaxDeliveriesReleasesTheEarlierDelivery: a message the stream
// holds unacknowledged comes again having reached retry.maxDeliveries; it is
// dead-lettered, and the earlier delivery is released and forgotten (it used to stay
// held and counted, until its ack timeout dead-lettered the message a second time).
func TestARedeliveryPastMaxDeliveriesReleasesTheEarlierDelivery(t *testing.T) {
	f := &settlingDLQSub{settlingSub: newSettlingSub()}
	s, url := serveStreamsOn(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    envelope: json\n    retry: {maxDeliveries: 3}\n")
	resp, rd := get(t, url+"/v1/streams/s")
	first := &Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`), Redeliveries: 1}
	f.deliver(first)
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	f.deliver(&Delivery{ID: "1:0:-1:-1", Payload: []byte(`{"n":0}`), Redeliveries: 3})
	f.deliver(&Delivery{ID: "1:1:-1:-1", Payload: []byte(`{"n":1}`)})
	if _, err := rd.Next(); err != nil { // 1:1: the stream goes on while the dead letter is published
		t.Fatal(err)
	}
	var dead []string
	for deadline := time.Now().Add(10 * time.Second); len(dead) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.dmu.Lock()
		dead = append([]string(nil), f.dead...)
		f.dmu.Unlock()
	}
	if len(dead) != 1 || dead[0] != "1:0:-1:-1" {
		t.Fatalf("dead-lettered %v, want 1:0:-1:-1 once", dead)
	}
	f.smu.Lock()
	released := append([]*Delivery(nil), f.released...)
	f.smu.Unlock()
	if len(released) != 1 || released[0] != first {
		t.Fatalf("released %v: want the earlier delivery of the dead-lettered message", released)
	}
	s.mu.Lock()
	sm := s.open[resp.Header.Get("Stream-Id")]
	s.mu.Unlock()
	if sm == nil {
		t.Fatal("no open stream")
	}
	sm.mu.Lock()
	_, still := sm.unacked["1:0:-1:-1"]
	sm.mu.Unlock()
	if still {
		t.Fatal("the dead-lettered message still awaits an acknowledgement on the stream")
	}
	if st, m := postIDs(t, url+"/v1/streams/s/ack", resp.Header.Get("Stream-Id"), "1:1:-1:-1"); st != 200 || m["acked"] != float64(1) {
		t.Fatalf("ack: %d %v", st, m)
	}
	if left := f.unsettled(); len(left) > 0 {
		t.Fatalf("deliveries of %v are still held", left)
	}
}
