package recordio

import (
	"bytes"
	"io"
	"testing"
)

// watchedReader hands out one chunk per Read and notes, at each Read, how much room the
// Reader offered and whether it held a pooled buffer while it waited.
type watchedReader struct {
	chunks [][]byte
	rd     *Reader
	room   []int
	held   []bool
}

func (w *watchedReader) Read(p []byte) (int, error) {
	w.room = append(w.room, len(p))
	w.held = append(w.held, w.rd != nil && w.rd.held != nil)
	if len(w.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, w.chunks[0])
	if w.chunks[0] = w.chunks[0][n:]; len(w.chunks[0]) == 0 {
		w.chunks = w.chunks[1:]
	}
	return n, nil
}

func TestReaderWaitsBetweenRecordsWithoutItsLargeBuffer(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 40_000) // needs a pooled buffer
	src := &watchedReader{chunks: [][]byte{
		AppendRecord(nil, big),                // read 0 (small), then the rest into a pooled buffer
		AppendRecord(nil, []byte("after")),    // waited for with the first record consumed
		AppendRecord(nil, []byte("and more")), // likewise
	}}
	rd := NewReader(src, BufferSize(64<<10))
	src.rd = rd
	rec, err := rd.Next()
	if err != nil || !bytes.Equal(rec, big) {
		t.Fatalf("first record: %d bytes, %v", len(rec), err)
	}
	if rd.held == nil {
		t.Fatal("a 40 000-byte record was read without a pooled buffer")
	}
	waits := len(src.room)
	for _, want := range []string{"after", "and more"} {
		if rec, err := rd.Next(); err != nil || string(rec) != want {
			t.Fatalf("record %q, %v; want %q", rec, err, want)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for i := waits; i < len(src.room); i++ {
		if src.held[i] || src.room[i] > smallBuffer {
			t.Fatalf("read %d, between records, offered %d bytes with a pooled buffer held: %v (reads: %v)", i, src.room[i], src.held[i], src.room)
		}
	}
	if rd.held != nil || cap(rd.buf) > smallBuffer {
		t.Fatalf("the Reader holds a %d-byte buffer after the end of its input", cap(rd.buf))
	}
}

func TestReaderRecordStaysIntactWhileOtherReadersReuseBuffers(t *testing.T) {
	// A record is valid until its Reader's next call, whatever other Readers do with
	// the pooled buffers meanwhile.
	a := bytes.Repeat([]byte("a"), 30_000)
	ra := NewReader(&watchedReader{chunks: [][]byte{AppendRecord(nil, a), AppendRecord(nil, a)}}, BufferSize(32<<10))
	got, err := ra.Next()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		other := bytes.Repeat([]byte{byte('0' + i%10)}, 30_000)
		rb := NewReader(bytes.NewReader(AppendRecord(AppendRecord(nil, other), []byte("x"))), BufferSize(32<<10))
		for {
			if _, err := rb.Next(); err != nil {
				break
			}
		}
	}
	if !bytes.Equal(got, a) {
		t.Fatal("a record changed before its Reader's next call: its buffer went to another Reader")
	}
	if rec, err := ra.Next(); err != nil || !bytes.Equal(rec, a) {
		t.Fatalf("second record: %d bytes, %v", len(rec), err)
	}
}

func TestReaderTakesItsLargeBufferWhileInputKeepsComing(t *testing.T) {
	// Small records arriving faster than they are read: after the first read into the
	// small buffer, the Reader reads in its large buffer's pieces, not the small one's.
	var in []byte
	for range 2000 {
		in = AppendRecord(in, bytes.Repeat([]byte("s"), 64))
	}
	src := &watchedReader{chunks: [][]byte{in}}
	rd := NewReader(src)
	n := 0
	for {
		if _, err := rd.Next(); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		n++
	}
	if n != 2000 {
		t.Fatalf("%d records, want 2000", n)
	}
	if limit := 2 + 2*len(in)/defaultBufferSize; len(src.room) > limit {
		t.Fatalf("%d reads for %d bytes, more than %d: the Reader kept reading into its small buffer (%v...)", len(src.room), len(in), limit, src.room[:8])
	}
}
