package recordio

import (
	"io"
	"strconv"
)

// AppendRecord appends rec to dst as one RecordIO record and returns the extended slice.
func AppendRecord(dst, rec []byte) []byte {
	dst = strconv.AppendUint(dst, uint64(len(rec)), 10)
	dst = append(dst, '\n')
	return append(dst, rec...)
}

// AppendHeader appends the header of a record of size bytes, for callers that write the
// record's bytes themselves (a streamed record).
func AppendHeader(dst []byte, size uint64) []byte {
	dst = strconv.AppendUint(dst, size, 10)
	return append(dst, '\n')
}

const writerBufferSize = 32 << 10

// Writer encodes records onto an io.Writer, buffering small ones; call Flush to push
// buffered records out. After a write error every call returns that error.
type Writer struct {
	w   io.Writer
	buf []byte
	err error
}

// NewWriter returns a Writer with a 32 KiB buffer.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, buf: make([]byte, 0, writerBufferSize)}
}

// Write encodes rec as one record. Records that do not fit the buffer are written
// through without being copied.
func (w *Writer) Write(rec []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf)+maxDigits+1+len(rec) <= cap(w.buf) {
		w.buf = AppendRecord(w.buf, rec)
		return nil
	}
	w.buf = AppendHeader(w.buf, uint64(len(rec)))
	if len(rec) <= cap(w.buf)-len(w.buf) {
		w.buf = append(w.buf, rec...)
		return nil
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return w.write(rec)
}

// Buffered returns the number of bytes waiting for Flush.
func (w *Writer) Buffered() int { return len(w.buf) }

// Flush writes the buffered records to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	err := w.write(w.buf)
	w.buf = w.buf[:0]
	return err
}

func (w *Writer) write(p []byte) error {
	n, err := w.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
	}
	return err
}
