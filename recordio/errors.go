package recordio

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is. The errors a Reader returns are *Error
// values that wrap one of these and say where in the stream it happened.
var (
	// ErrBadHeader: a record-size line that is not 1 to 20 decimal digits fitting in a
	// uint64 (optionally surrounded by spaces, tabs or a CR), or a header line too long.
	ErrBadHeader = errors.New("recordio: bad record header")
	// ErrRecordTooLarge: a record longer than the reader accepts.
	ErrRecordTooLarge = errors.New("recordio: record too large")
	// ErrTruncated: the input ended inside a header or a record.
	ErrTruncated = errors.New("recordio: stream truncated")
)

// Error is a decoding error at a known place in the stream.
type Error struct {
	Err    error  // ErrBadHeader, ErrRecordTooLarge, ErrTruncated, or the underlying reader's error
	Offset int64  // byte offset of the header concerned, from the start of the stream
	Record int64  // zero-based index of the record that header begins
	Detail string // what exactly was wrong, with the offending value
}

func (e *Error) Error() string {
	msg := e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return fmt.Sprintf("%s (record %d, header at byte offset %d)", msg, e.Record, e.Offset)
}

func (e *Error) Unwrap() error { return e.Err }
