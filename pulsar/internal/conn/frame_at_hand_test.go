package conn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// TestWholeFrameBuffered: a frame counts as at hand only when all of it has been read
// from the socket: a reader that waits for a frame's rest would keep a stream that trusts
// the hint from flushing.
func TestWholeFrameBuffered(t *testing.T) {
	frame := func(n int) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(n))
		return append(b, bytes.Repeat([]byte{'x'}, n)...)
	}
	for _, tc := range []struct {
		name     string
		buffered []byte
		want     bool
	}{
		{"nothing", nil, false},
		{"part of the size", []byte{0, 0}, false},
		{"the size only", frame(10)[:4], false},
		{"all but a byte", frame(10)[:13], false},
		{"a whole frame", frame(10), true},
		{"an empty frame", frame(0), true},
		{"a whole frame and part of another", append(frame(10), frame(20)[:6]...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(tc.buffered), blocking{}), 64)
			if len(tc.buffered) > 0 {
				if _, err := br.Peek(len(tc.buffered)); err != nil {
					t.Fatal(err)
				}
			}
			if got := wholeFrameBuffered(br); got != tc.want {
				t.Fatalf("wholeFrameBuffered with %d bytes buffered = %v, want %v", br.Buffered(), got, tc.want)
			}
		})
	}
}

// blocking is a socket with nothing more to read: a test that reads it has read too far.
type blocking struct{}

func (blocking) Read([]byte) (int, error) { panic("read beyond what was buffered") }
