package ingress

import (
	"testing"
	"time"
)

func TestPendingQueueKeepsOrderAndBoundAndGivesItsRingBackWhenEmpty(t *testing.T) {
	const limit = 1000
	q := newPendingQueue(limit)
	entries := make([]*entry, limit)
	for i := range entries {
		entries[i] = &entry{seq: int64(i)}
		if !q.push(entries[i], nil) {
			t.Fatalf("push %d refused", i)
		}
	}
	if len(q.ring) < limit {
		t.Fatalf("ring of %d for %d entries", len(q.ring), limit)
	}
	// Full: the next push waits until done or an entry leaves.
	done := make(chan struct{})
	close(done)
	if q.push(&entry{seq: limit}, done) {
		t.Fatal("a push into a full queue did not wait")
	}
	pushed := make(chan bool)
	go func() { pushed <- q.push(&entry{seq: limit}, make(chan struct{})) }()
	select {
	case <-pushed:
		t.Fatal("a push into a full queue returned before an entry left")
	case <-time.After(20 * time.Millisecond):
	}
	for i := range limit + 1 {
		e, closed := q.take()
		if i == 0 && !<-pushed {
			t.Fatal("the waiting push was refused")
		}
		if e == nil || closed || e.seq != int64(i) {
			t.Fatalf("take %d: %+v closed=%v", i, e, closed)
		}
	}
	// Empty: the collector waits, and the queue keeps only its small ring meanwhile.
	got := make(chan *entry)
	go func() { got <- q.wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		waiting, small := q.waiting, len(q.ring) == smallRing && q.ringClass == 0
		q.mu.Unlock()
		if waiting {
			if !small {
				t.Fatalf("an empty queue holds a ring of %d entries while the collector waits", len(q.ring))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the collector never waited")
		}
		time.Sleep(time.Millisecond)
	}
	last := &entry{seq: 99}
	q.push(last, nil)
	if e := <-got; e != last {
		t.Fatalf("wait returned %+v", e)
	}
	go func() { got <- q.wait() }()
	time.Sleep(5 * time.Millisecond)
	q.close()
	if e := <-got; e != nil {
		t.Fatalf("wait on a closed queue returned %+v", e)
	}
	if e, closed := q.take(); e != nil || !closed {
		t.Fatalf("take on a closed, empty queue: %+v %v", e, closed)
	}
}
