package pulsar

import (
	"math/bits"
	"sync"
)

// Batch buffers are reused: a busy producer made one of about its batch's size for every
// batch (128 KiB at the default BatchingMaxBytes), as many bytes as it sent, and zeroing
// them and collecting them was about a sixth of the ingress path's CPU at saturation. A
// buffer goes back to these pools when its batch's receipt takes it off the pending
// queue (the frame is no longer needed for a resend, and the connection wrote its bytes
// before the broker could answer them), or at once when the batch was compressed into
// another buffer. A pool's buffers the collector finds unused for two cycles are
// freed, so an idle producer holds none.
//
// Pool k holds buffers of capacity at least 1<<k (k from minBatchBufShift), so a buffer
// taken for n bytes from pool ceil(log2(n)) never grows.
const (
	minBatchBufShift = 10 // 1 KiB: smaller batches are not worth pooling
	maxBatchBufShift = 26 // 64 MiB
)

var batchBufs [maxBatchBufShift + 1]sync.Pool // of *[]byte

// getBatchBuf returns a buffer of length length and capacity at least size.
func getBatchBuf(length, size int) []byte {
	k := bits.Len(uint(size - 1)) // ceil(log2(size))
	if k < minBatchBufShift || k > maxBatchBufShift {
		return make([]byte, length, size)
	}
	if p, ok := batchBufs[k].Get().(*[]byte); ok {
		return (*p)[:length]
	}
	return make([]byte, length, 1<<k)
}

// putBatchBuf gives back a buffer nothing refers to any more.
func putBatchBuf(b []byte) {
	k := bits.Len(uint(cap(b))) - 1 // floor(log2(cap))
	if k < minBatchBufShift {
		return
	}
	k = min(k, maxBatchBufShift)
	b = b[:0]
	batchBufs[k].Put(&b)
}
