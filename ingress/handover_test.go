package ingress

import (
	"testing"
	"time"
)

// The collector waiting for a record's outcome is woken when the outcome comes (and
// only the entry it waits for wakes it), and stops waiting when the stream is
// abandoned; an outcome that came before it looked needs no wake-up.
func TestTheCollectorIsWokenByTheOutcomeItWaitsFor(t *testing.T) {
	q := newPendingQueue(8)
	e, other := &entry{q: q}, &entry{q: q}
	got := make(chan bool, 1)
	go func() { got <- q.awaitOutcome(e, nil) }()
	for q.waitingOn.Load() != e {
		time.Sleep(time.Millisecond)
	}
	other.settled() // a later record's outcome: the collector looks again and goes on waiting
	select {
	case ok := <-got:
		t.Fatalf("the wait ended (%v) before its entry was settled", ok)
	case <-time.After(20 * time.Millisecond):
	}
	e.settled()
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("a settled entry's wait reported the stream abandoned")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the collector was not woken by the outcome it waited for")
	}
	if q.waitingOn.Load() != nil {
		t.Fatal("the collector still says it waits")
	}
	if !q.awaitOutcome(e, nil) {
		t.Fatal("an entry settled before the wait")
	}

	abandon := make(chan struct{})
	late := &entry{q: q}
	go func() { got <- q.awaitOutcome(late, abandon) }()
	close(abandon)
	if ok := <-got; ok {
		t.Fatal("an unsettled entry's wait ended as settled when the stream was abandoned")
	}
	late.settled() // the publisher's callback still comes: nobody waits, nothing blocks
}
