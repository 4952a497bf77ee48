package ingress

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// pendingQueue holds a stream's records awaiting their outcome, in input order, from
// the reader to the collector: at most limit of them (ingress.pendingRecords), the
// reader waiting while it is full. Its ring grows as records pile up and goes back to a
// pool shared by the streams whenever the collector finds it empty, so an idle stream
// holds a ring of a few records, not room for all it may have pending (a channel of
// ingress.pendingRecords made 8 KiB per stream at the default 1 000, idle or not).
type pendingQueue struct {
	mu        sync.Mutex
	ring      []*entry // ring[head], ... the n entries, in order; len is a power of two
	head, n   int
	limit     int
	closed    bool
	waiting   bool                  // the collector waits on more
	more      chan struct{}         // a token once an entry is added or the queue closed while the collector waits, or waitingOn settled
	waitingOn atomic.Pointer[entry] // the entry whose outcome the collector waits for (awaitOutcome)
	room      chan struct{}         // a token once an entry leaves a full queue; made when the queue first fills
	small     [smallRing]*entry
	ringClass int       // the pool class of ring, 0 while it is small
	box       *[]*entry // ring's box in the pool, nil while it is small
}

const smallRing = 8

// rings holds the rings streams gave back: rings[k] holds rings of 1<<k entries.
var rings [bits.UintSize]sync.Pool

func newPendingQueue(limit int) *pendingQueue {
	q := &pendingQueue{limit: max(limit, 1), more: make(chan struct{}, 1)}
	q.ring = q.small[:]
	return q
}

// push adds e, waiting while the queue is full; it returns false, without adding e,
// once done is closed first.
func (q *pendingQueue) push(e *entry, done <-chan struct{}) bool {
	q.mu.Lock()
	for q.n >= q.limit {
		if q.room == nil {
			q.room = make(chan struct{}, 1) // only for a stream that fills its queue
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		}
		q.mu.Lock()
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = e
	q.n++
	wake := q.waiting
	e.idle = wake // before the collector can take it
	q.waiting = false
	q.mu.Unlock()
	if wake {
		q.signal(q.more)
	}
	return true
}

// take returns the next entry without waiting: nil when there is none, with closed set
// when none will come.
func (q *pendingQueue) take() (e *entry, closed bool) {
	q.mu.Lock()
	e, closed = q.takeLocked()
	q.mu.Unlock()
	return e, closed
}

// wait returns the next entry, waiting for one; nil once the queue is closed and empty.
// The queue is empty when the collector waits: its ring goes back to the pool.
func (q *pendingQueue) wait() *entry {
	q.mu.Lock()
	for {
		e, closed := q.takeLocked()
		if e != nil || closed {
			q.mu.Unlock()
			return e
		}
		q.shrink()
		q.waiting = true
		q.mu.Unlock()
		<-q.more
		q.mu.Lock()
	}
}

// awaitOutcome waits until e, taken off the queue, is settled (entry.settled); false
// once abandon is closed first. The collector waits for one entry at a time, never
// while it waits in wait, so the two share the channel more: a token either leaves
// makes the other look again, no more.
func (q *pendingQueue) awaitOutcome(e *entry, abandon <-chan struct{}) bool {
	q.waitingOn.Store(e) // before the flag is read again: settled reads it after setting the flag
	defer q.waitingOn.Store(nil)
	for !e.ready.Load() {
		select {
		case <-q.more:
		case <-abandon:
			return false
		}
	}
	return true
}

// close says no entry will be added.
func (q *pendingQueue) close() {
	q.mu.Lock()
	q.closed = true
	wake := q.waiting
	q.waiting = false
	q.mu.Unlock()
	if wake {
		q.signal(q.more)
	}
}

func (q *pendingQueue) takeLocked() (*entry, bool) {
	if q.n == 0 {
		return nil, q.closed
	}
	e := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.n--
	if q.n == q.limit-1 && q.room != nil {
		q.signal(q.room)
	}
	return e, false
}

func (q *pendingQueue) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a token is there already
	}
}

// grow doubles the full ring, with one from the pool when there is one.
func (q *pendingQueue) grow() {
	k := bits.Len(uint(len(q.ring))) // the class of twice len
	box, _ := rings[k].Get().(*[]*entry)
	if box == nil {
		nr := make([]*entry, 1<<k)
		box = &nr
	}
	nr := *box
	n := copy(nr, q.ring[q.head:])
	copy(nr[n:], q.ring[:q.head])
	q.release()
	q.ring, q.head, q.ringClass, q.box = nr, 0, k, box
}

// shrink gives an empty ring back to the pool and goes back to the small one.
func (q *pendingQueue) shrink() {
	if q.ringClass != 0 {
		q.release()
		q.ring, q.head, q.ringClass, q.box = q.small[:], 0, 0, nil
	}
}

// release gives the pool the ring being replaced, cleared of entries.
func (q *pendingQueue) release() {
	if q.ringClass == 0 {
		clear(q.small[:])
		return
	}
	clear(q.ring)
	rings[q.ringClass].Put(q.box)
}
