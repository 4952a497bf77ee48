package egress

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// frozenDLQSub is a fakeSub whose dead-letter topic never answers: DeadLetter returns
// only when its context ends or the test thaws it.
type frozenDLQSub struct {
	*fakeSub
	dmu     sync.Mutex
	tries   []string
	entered chan struct{} // one value per DeadLetter call
	thaw    chan struct{}
}

func newFrozenDLQSub() *frozenDLQSub {
	return &frozenDLQSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 64)}, entered: make(chan struct{}, 64), thaw: make(chan struct{})}
}

func (f *frozenDLQSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	return f, nil
}

func (f *frozenDLQSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	f.dmu.Lock()
	f.tries = append(f.tries, d.ID)
	f.dmu.Unlock()
	f.entered <- struct{}{}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.thaw:
		return nil
	}
}

func (f *frozenDLQSub) nackedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.nacked)
}

// withDeadLetterTimeout shortens the bound on one dead-letter publication for a test.
func withDeadLetterTimeout(t *testing.T, d time.Duration) {
	old := deadLetterTimeout
	deadLetterTimeout = d
	t.Cleanup(func() { deadLetterTimeout = old })
}

// TestAFrozenDeadLetterTopicCostsOneTimeoutNotOnePerMessage: ten messages pass their ack
// timeout at once with retry.maxDeliveries reached, and the dead-letter topic is frozen.
// The first publication waits out its timeout; the nine behind it go back for
// redelivery then, untried, instead of each waiting its own 30 s while pinned to this
// consumer.
func TestAFrozenDeadLetterTopicCostsOneTimeoutNotOnePerMessage(t *testing.T) {
	withDeadLetterTimeout(t, 300*time.Millisecond)
	f := newFrozenDLQSub()
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    ackTimeout: 50ms\n"+
		"    retry: {maxDeliveries: 1}\n")
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	const n = 10
	for i := range n {
		f.feed <- &Delivery{ID: fmt.Sprintf("1:%d:-1:-1", i), Topic: "persistent://public/default/t", Payload: []byte(`{}`)}
	}
	for range n {
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for f.nackedCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s %d of %d expired messages were sent back", f.nackedCount(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if len(f.tries) != 1 {
		t.Fatalf("the frozen dead-letter topic was tried %d times (%v): once is enough to know it is down", len(f.tries), f.tries)
	}
}

// TestTheStreamDeliversWhileADeadLetterWaits: a message that comes again past
// retry.maxDeliveries is being dead-lettered to a topic that does not answer; the
// messages behind it are delivered meanwhile.
func TestTheStreamDeliversWhileADeadLetterWaits(t *testing.T) {
	f := newFrozenDLQSub()
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: shared\n    ack: client\n    retry: {maxDeliveries: 3}\n")
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	defer close(f.thaw)
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte(`poison`), Redeliveries: 3}
	<-f.entered
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "persistent://public/default/t", Payload: []byte(`next`)}
	got := make(chan string, 1)
	go func() {
		rec, err := rd.Next()
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(rec)
	}()
	select {
	case rec := <-got:
		if rec != "next" {
			t.Fatalf("read %q, want the next message", rec)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery in 10 s while a dead letter waited on its topic")
	}
}
