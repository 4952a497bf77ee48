package client

import "github.com/recordio-bridge/bridge/recordio"

// recordBuffer holds the Publisher's encoded records as one stream of bytes, kept in
// blocks: a record is never split across two, and releasing the front frees whole blocks,
// so what is still held is never moved (a contiguous buffer compacted as receipts released
// records copied the held bytes again and again, and grew by copying all of them).
type recordBuffer struct {
	blocks []*recordBlock // in stream order; the last takes new records
	free   []*recordBlock // released blocks of recordBlockSize, kept for reuse
	end    int64          // the stream offset after the last byte
}

type recordBlock struct {
	base int64  // the stream offset of data[0]
	data []byte // len: the bytes written; cap: the block's size
}

const (
	recordBlockSize = 64 << 10
	recordFreeMax   = 16 // blocks kept for reuse (1 MiB): what a burst of receipts frees at once
)

// append encodes rec at the end and returns its offset in the stream.
func (r *recordBuffer) append(rec []byte) int64 {
	var hdr [24]byte
	h := recordio.AppendHeader(hdr[:0], uint64(len(rec)))
	need := len(h) + len(rec)
	var blk *recordBlock
	if n := len(r.blocks); n > 0 {
		blk = r.blocks[n-1]
	}
	if blk == nil || cap(blk.data)-len(blk.data) < need {
		blk = r.newBlock(need)
		r.blocks = append(r.blocks, blk)
	}
	off := r.end
	blk.data = append(append(blk.data, h...), rec...)
	r.end += int64(need)
	return off
}

func (r *recordBuffer) newBlock(need int) *recordBlock {
	if need > recordBlockSize {
		return &recordBlock{base: r.end, data: make([]byte, 0, need)} // a large record alone
	}
	if n := len(r.free); n > 0 {
		blk := r.free[n-1]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
		blk.base, blk.data = r.end, blk.data[:0]
		return blk
	}
	return &recordBlock{base: r.end, data: make([]byte, 0, recordBlockSize)}
}

// start is the offset of the first byte held (end when none is).
func (r *recordBuffer) start() int64 {
	if len(r.blocks) == 0 {
		return r.end
	}
	return r.blocks[0].base
}

// read copies bytes from pos on, start() <= pos < end, into q: at most up to the end of
// pos's block.
func (r *recordBuffer) read(q []byte, pos int64) int {
	i := len(r.blocks) - 1
	for r.blocks[i].base > pos { // a request's body reads near the end, mostly
		i--
	}
	blk := r.blocks[i]
	return copy(q, blk.data[pos-blk.base:])
}

// release frees the blocks whose bytes all lie before upTo.
func (r *recordBuffer) release(upTo int64) {
	n := 0
	for n < len(r.blocks) && r.blocks[n].base+int64(len(r.blocks[n].data)) <= upTo {
		if blk := r.blocks[n]; cap(blk.data) == recordBlockSize && len(r.free) < recordFreeMax {
			r.free = append(r.free, blk)
		}
		n++
	}
	if n == 0 {
		return
	}
	r.blocks = r.blocks[:copy(r.blocks, r.blocks[n:])]
	clear(r.blocks[len(r.blocks):cap(r.blocks)][:n])
}
