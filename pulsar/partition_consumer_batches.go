package pulsar

import (
	"time"
)

type entryKey struct{ ledger, entry uint64 }

// batchTracker remembers which indexes of a delivered batch are not acknowledged yet:
// bit i set means index i is outstanding (the PIP-54 ack_set convention).
//
// It outlives a redelivery of its entry that the consumer asks for: the broker sends
// the whole entry again, with an ack_set of what it knows acknowledged (nothing when its
// batch-index acknowledgements are off), so the tracker filters what the application
// acknowledged, and on a Shared or Key_Shared subscription what it still holds: only
// the indexes handed back (nacked) are delivered again. It also gives each of them a
// redelivery count of its own, where the broker keeps one per entry.
type batchTracker struct {
	bits []int64
	size int
	// back: the indexes handed back and not delivered again yet (set only on Shared and
	// Key_Shared subscriptions, with handedBack the last time). The record stays while
	// hand-backs are in flight (asked for, their arrival not come): the broker sends the
	// entry once per request that found it already dispatched again, and each arrival
	// delivers only what is still in back. came: the entry arrived since the last one.
	back       []int64
	handedBack time.Time
	inFlight   int
	came       bool
	// base is the broker's redelivery count when the entry first arrived here; again[i]
	// how many times index i was handed back since.
	base  uint32
	again []uint32
}

func newBatchTracker(size int, ackSet []int64) *batchTracker {
	t := &batchTracker{bits: make([]int64, (size+63)/64), size: size}
	if len(ackSet) > 0 {
		copy(t.bits, ackSet)
		return t
	}
	for i := range size {
		t.bits[i/64] |= 1 << (i % 64)
	}
	return t
}

func (t *batchTracker) clear(i int) {
	if i >= 0 && i < t.size {
		t.bits[i/64] &^= 1 << (i % 64)
	}
}

func (t *batchTracker) outstanding(i int) bool {
	return i >= 0 && i < t.size && t.bits[i/64]&(1<<(i%64)) != 0
}

func (t *batchTracker) done() bool {
	for _, w := range t.bits {
		if w != 0 {
			return false
		}
	}
	return true
}

// handBack records that indexes (nacked) go back to the broker with their entry.
func (t *batchTracker) handBack(indexes []int32, now time.Time) {
	if t.back == nil {
		t.back, t.again = make([]int64, len(t.bits)), make([]uint32, t.size)
	}
	for _, i := range indexes {
		if i >= 0 && int(i) < t.size {
			t.back[i/64] |= 1 << (i % 64)
			t.again[i]++
		}
	}
	t.handedBack = now
	t.inFlight++
	t.came = false
}

// arrived ends the hand-back record once every hand-back in flight has come.
func (t *batchTracker) arrived() {
	t.came = true
	if t.inFlight--; t.inFlight <= 0 {
		clear(t.back)
		t.handedBack, t.inFlight = time.Time{}, 0
	}
}

// forgetHandBack drops the record, its arrivals no longer awaited.
func (t *batchTracker) forgetHandBack() {
	clear(t.back)
	t.handedBack, t.inFlight, t.came = time.Time{}, 0, false
}

// deliver filters the entry's messages as it comes (again): an index acknowledged here
// (or by the broker's ack_set, ANDed in first) is not delivered, nor after a hand-back
// one that was not handed back (the application holds it). It reports whether index i
// is delivered, and its redelivery count: once the entry was handed back, the count of
// its own hand-backs on top of the broker's when it first came; else the broker's.
func (t *batchTracker) deliver(i int, handedBack bool, count uint32) (bool, uint32) {
	if !t.outstanding(i) {
		return false, 0
	}
	if handedBack {
		if t.back[i/64]&(1<<(i%64)) == 0 {
			return false, 0
		}
		t.back[i/64] &^= 1 << (i % 64) // delivered: a second arrival in flight does not bring it again
	}
	if t.again != nil {
		// The broker's count is the entry's: every hand-back raises it for all its
		// messages, and an acknowledgement of any of them resets it.
		count = t.base + t.again[i]
	}
	return true, count
}

// handBackExpiry is how long a tracker handed back waits for its entry to come again: on
// a Shared subscription it may go to another consumer, and this one would keep it for
// ever. Forgotten, it only lets a later arrival deliver what the application holds or
// acknowledged without the broker's knowing (a duplicate, never a loss). An entry that
// came again, fewer times than handed back, keeps its tracker and loses only the record.
var handBackExpiry = 10 * time.Minute

// batchIndex is the index to track m by in its entry's nacks: its batch index, or -1
// when it is its entry's only message.
func batchIndex(id MessageID) int32 {
	if id.BatchSize <= 1 || id.BatchIndex < 0 {
		return -1
	}
	return id.BatchIndex
}
