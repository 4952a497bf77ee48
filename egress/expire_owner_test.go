package egress

import (
	"context"
	"sync"
	"testing"
	"time"
)

// closingDLQSub dead-letters only once its request's context ends, and then returns
// from DeadLetter only after the subscription was closed (or a second has passed): the
// retry that follows lands after Close if nothing waits for it.
type closingDLQSub struct {
	*fakeSub
	once     sync.Once
	entered  chan struct{}
	closedCh chan struct{}
	late     []string // calls made on the subscription after its Close
}

func (f *closingDLQSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *closingDLQSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	f.once.Do(func() { close(f.entered) })
	<-ctx.Done()
	select {
	case <-f.closedCh:
	case <-time.After(time.Second):
	}
	return ctx.Err()
}

func (f *closingDLQSub) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.closedCh)
	}
	return nil
}

func (f *closingDLQSub) Nack(d *Delivery, after time.Duration) {
	f.mu.Lock()
	if f.closed {
		f.late = append(f.late, "Nack "+d.ID)
	}
	f.mu.Unlock()
	f.fakeSub.Nack(d, after)
}

// TestAckTimeoutsEndBeforeTheSubscriptionCloses: an ack=client stream's acknowledgement
// timeouts run in a goroutine of the stream; it must be over before the stream closes
// its subscription. It was only told to stop: a message whose timeout was being
// dead-lettered when the client went was nacked on the closed subscription, after the
// stream had returned (an unowned goroutine acting on what it no longer holds).
func TestAckTimeoutsEndBeforeTheSubscriptionCloses(t *testing.T) {
	f := &closingDLQSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, entered: make(chan struct{}), closedCh: make(chan struct{})}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    ackTimeout: 50ms\n"+
		"    retry: {maxDeliveries: 1}\n")
	resp, rd := get(t, url+"/v1/streams/s")
	f.feed <- &Delivery{ID: "1:0:1:-1", Topic: "persistent://public/default/t", Payload: []byte(`{}`)}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.entered: // its ack timeout passed: being dead-lettered
	case <-time.After(10 * time.Second):
		t.Fatal("the unacknowledged message was never dead-lettered")
	}
	resp.Body.Close() // the client goes
	select {
	case <-f.closedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never closed its subscription")
	}
	// Whatever the timeout goroutine still does happens within a second of the close.
	time.Sleep(1500 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.late) > 0 {
		t.Fatalf("after the subscription closed the stream still called %v", f.late)
	}
}
