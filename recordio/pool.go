package recordio

import (
	"math/bits"
	"sync"
)

// pools holds the read buffers of Readers between records, by size class: pools[k]
// holds boxes of buffers of at least 1<<k bytes. A stream that keeps sending gets its
// buffer back at once from its processor's cache; the buffers of idle streams go to
// the garbage collector after two collections, as sync.Pool does.
var pools [bits.UintSize]sync.Pool

// takeBuffer returns a box holding a buffer of exactly size bytes (its capacity may be
// larger), from the pool when one fits.
func takeBuffer(size int) *[]byte {
	k := bits.Len(uint(size)) - 1
	if box, _ := pools[k].Get().(*[]byte); box != nil {
		if cap(*box) >= size {
			*box = (*box)[:size]
			return box
		}
		// A buffer cut to another Reader's limit, smaller than this size of its class.
		pools[k].Put(box)
	}
	b := make([]byte, size)
	return &b
}

// giveBuffer puts a box taken with takeBuffer back in the pool of its capacity's class.
func giveBuffer(box *[]byte) {
	pools[bits.Len(uint(cap(*box)))-1].Put(box)
}
