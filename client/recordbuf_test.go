package client

import (
	"bytes"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// The record buffer reads back the stream AppendRecord would write, from any held
// position, across blocks and with records larger than a block; releasing frees only whole
// blocks before the given offset.
func TestRecordBufferKeepsTheStreamAcrossBlocks(t *testing.T) {
	var r recordBuffer
	var want []byte
	var offs []int64
	for i := range 3000 {
		size := 100 + i%50
		if i%1000 == 999 {
			size = recordBlockSize + 10 // a record larger than a block
		}
		rec := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if off := r.append(rec); off != int64(len(want)) {
			t.Fatalf("record %d at offset %d, want %d", i, off, len(want))
		}
		offs = append(offs, int64(len(want)))
		want = recordio.AppendRecord(want, rec)
	}
	if r.end != int64(len(want)) {
		t.Fatalf("end %d, want %d", r.end, len(want))
	}
	readFrom := func(pos int64) []byte {
		var got []byte
		q := make([]byte, 5000)
		for pos < r.end {
			n := r.read(q, pos)
			if n == 0 {
				t.Fatalf("read at %d returned nothing", pos)
			}
			got = append(got, q[:n]...)
			pos += int64(n)
		}
		return got
	}
	if got := readFrom(0); !bytes.Equal(got, want) {
		t.Fatal("the stream read back differs from the records appended")
	}
	upTo := offs[1500]
	r.release(upTo)
	if s := r.start(); s > upTo || upTo-s >= recordBlockSize {
		t.Fatalf("after releasing up to %d the buffer starts at %d", upTo, s)
	}
	if got := readFrom(upTo); !bytes.Equal(got, want[upTo:]) {
		t.Fatal("the stream read back after a release differs")
	}
	r.release(r.end)
	if len(r.blocks) != 0 || r.start() != r.end || len(r.free) > recordFreeMax {
		t.Fatalf("after releasing everything: %d blocks, start %d, end %d, %d free", len(r.blocks), r.start(), r.end, len(r.free))
	}
	off := r.append([]byte("x"))
	if off != int64(len(want)) || !bytes.Equal(readFrom(off), []byte("1\nx")) {
		t.Fatal("a record appended after releasing everything does not read back")
	}
}
