// Package framepool lends the buffers a connection reads large frames into, and takes
// them back once nothing reads them: a consumer's messages point into the frame they
// came in, so a frame's buffer may be reused only after every message that points into
// it was released by its holder, and no sooner.
//
// A buffer is lent to the connection's reader (Get). Whoever the frame is handed to
// either adopts it (Adopt: one reference per message that points into it, each dropped
// once by Release) or does nothing, and then the buffer is left to the garbage collector
// like any other: what is never adopted is never reused, so a path that keeps a frame
// without knowing of the pool (parked entries, chunks, entries delivered as stored)
// stays as safe as it was. Only the last Release of an adopted buffer puts it back.
package framepool

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// minShift and maxShift bound the size classes: 2^minShift < n ≤ 2^maxShift bytes are
// pooled (in powers of two); smaller frames (commands, receipts, lone small messages)
// cost little to allocate, and larger ones than a broker's default limit allows are rare.
const (
	minShift = 12 // 4 KiB
	maxShift = 23 // 8 MiB: a 5 MiB message and its frame's padding
)

var classes [maxShift - minShift + 1]sync.Pool

// Buf is a pooled frame buffer with its count of holders.
type Buf struct {
	b     []byte // len n: the frame as read; cap: its class's size
	class int
	refs  atomic.Int32
}

// poison, when set (tests only, through SetPoison), fills every buffer put back with
// PoisonByte, so a payload read after its frame was released reads that, not its bytes.
var poison atomic.Bool

// PoisonByte is what a released buffer is filled with while SetPoison is on.
const PoisonByte = 0xDB

// SetPoison turns the filling of released buffers on or off (for tests); it returns
// what it was.
func SetPoison(on bool) bool { return poison.Swap(on) }

// Get returns a buffer of n bytes (their content undefined: the caller overwrites them
// all), or nil when n is outside the pooled classes, for the caller to allocate.
func Get(n int) *Buf {
	if n <= 1<<minShift || n > 1<<maxShift {
		return nil
	}
	c := bits.Len(uint(n-1)) - minShift
	if v := classes[c].Get(); v != nil {
		b := v.(*Buf)
		b.b = b.b[:n]
		return b
	}
	made.Add(1)
	return &Buf{b: make([]byte, n, 1<<(c+minShift)), class: c}
}

// made counts the buffers Get allocated rather than reused (for tests).
var made atomic.Int64

// Made returns how many buffers Get allocated since the process started.
func Made() int64 { return made.Load() }

// Bytes returns the buffer's n bytes.
func (b *Buf) Bytes() []byte { return b.b }

// Adopt makes n holders of b (n ≥ 1), each to call Release once. It is called at most
// once per Get, by the one the frame was handed to, before any holder may release it.
func (b *Buf) Adopt(n int) {
	if n < 1 || !b.refs.CompareAndSwap(0, int32(n)) {
		panic("framepool: Adopt of a buffer already adopted, or by no holder")
	}
}

// Release drops one holder's reference; the last one puts the buffer back. A holder
// must not read the buffer, nor anything pointing into it, once it released it.
func (b *Buf) Release() {
	switch r := b.refs.Add(-1); {
	case r > 0:
		return
	case r < 0:
		panic("framepool: a buffer released more times than it was adopted")
	}
	if poison.Load() {
		full := b.b[:cap(b.b)]
		for i := range full {
			full[i] = PoisonByte
		}
	}
	classes[b.class].Put(b)
}
