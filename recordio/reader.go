package recordio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

const (
	// DefaultMaxRecordSize is the largest record a Reader returns unless told otherwise
	// (mesos-go's default buffer cap).
	DefaultMaxRecordSize = 4 << 20
	// MaxHeaderLine is the longest header line accepted, white space included.
	MaxHeaderLine = 64
	// maxDigits is the most digits a uint64 length can have.
	maxDigits = 20

	defaultBufferSize = 16 << 10
	// smallBuffer is what a Reader waits for input with while no record is in progress:
	// a whole small record fits, and an idle stream holds no larger buffer.
	smallBuffer = 512
)

// Option configures a Reader.
type Option func(*Reader)

// MaxRecordSize sets the largest record Next returns as one slice (default 4 MiB).
// The Reader's buffer grows to at most this size plus one header.
func MaxRecordSize(n int) Option {
	return func(r *Reader) {
		if n >= 0 {
			r.max = n
		}
	}
}

// StreamLargerRecords lets NextRecord return records longer than MaxRecordSize, up to
// limit bytes, as a stream of known size (Record.Body) instead of failing with
// ErrRecordTooLarge. Such a record is never held in memory whole.
func StreamLargerRecords(limit int64) Option {
	return func(r *Reader) { r.streamMax = limit }
}

// BufferSize sets the read buffer taken while input keeps coming (default 16 KiB); it
// grows when a record needs it. Between records, once every byte read is consumed, the
// Reader gives the buffer back to a pool shared by all Readers and waits for more input
// in a small buffer of its own, so an idle stream holds no large buffer.
func BufferSize(n int) Option {
	return func(r *Reader) {
		if n > MaxHeaderLine {
			r.initial = n
		}
	}
}

// Reader decodes a RecordIO stream. It is not safe for concurrent use.
type Reader struct {
	src       io.Reader
	buf       []byte
	r, w      int   // buf[r:w] holds read but unconsumed input
	base      int64 // stream offset of buf[0]
	max       int
	streamMax int64
	initial   int
	records   int64   // records returned so far
	err       error   // sticky: once set, every call returns it
	srcErr    error   // error the source returned with data, reported once the data is used
	body      *body   // the streamed record in progress, if any
	held      *[]byte // buf's box in the pool when buf is a pooled buffer, else nil (buf is small or nil)
	small     [smallBuffer]byte
}

// NewReader returns a Reader that decodes the RecordIO stream read from r.
func NewReader(r io.Reader, opts ...Option) *Reader {
	rd := &Reader{src: r, max: DefaultMaxRecordSize, initial: defaultBufferSize}
	for _, o := range opts {
		o(rd)
	}
	return rd
}

// Record is one decoded record with its place in the stream.
type Record struct {
	// Data is the record when it is held in memory; it is only valid until the next call
	// to Next or NextRecord, which may reuse the buffer.
	Data []byte
	// Body streams a record longer than MaxRecordSize (see StreamLargerRecords); it reads
	// exactly Size bytes, then io.EOF. It is nil for in-memory records. Whatever is left
	// unread is skipped by the next call to Next or NextRecord.
	Body io.Reader
	// Size is the record's length in bytes.
	Size int64
	// Offset is the byte offset of the record's header in the stream.
	Offset int64
	// Index is the zero-based position of the record in the stream.
	Index int64
}

// Records returns how many records the Reader has returned so far.
func (r *Reader) Records() int64 { return r.records }

// Offset returns the byte offset of the first input byte not yet consumed.
func (r *Reader) Offset() int64 { return r.base + int64(r.r) }

// Next returns the next record. The slice is only valid until the next call: the Reader
// may reuse its buffer. It returns io.EOF only at a clean record boundary; any other error
// is an *Error (or wraps the source's error) and is returned again by every later call.
func (r *Reader) Next() ([]byte, error) {
	// Fast path: a bare decimal header and its whole record are already buffered.
	if r.err == nil && r.body == nil {
		win := r.buf[r.r:r.w]
		var size uint64
		n := 0
		for n < len(win) && n < maxDigits-1 {
			c := win[n] - '0'
			if c > 9 {
				break
			}
			size = size*10 + uint64(c)
			n++
		}
		if n > 0 && n < len(win) && win[n] == '\n' && size <= uint64(r.max) && size <= uint64(len(win)-n-1) {
			start := n + 1
			end := start + int(size)
			r.r += end
			r.records++
			return win[start:end:end], nil
		}
	}
	rec, err := r.next(false)
	if err != nil {
		return nil, err
	}
	return rec.Data, nil
}

// Wait blocks until input for the next record is at hand, or the source ends or fails:
// whatever it read, the next call to Next or NextRecord decodes (an end or an error
// then comes from that call as it would have without Wait). It returns at once when
// input is buffered already, a streamed record is in progress, or the Reader has failed.
//
// Next and NextRecord wait the same way when they run out of input; Wait is for a
// caller whose goroutine spends most of its life waiting between records: its frame
// and fill's are all the Reader adds to that goroutine's stack while it waits, where
// NextRecord's decoding of the header adds half a kilobyte, and the runtime gives a
// parked goroutine's stack back by halves only while less than a quarter is in use.
func (r *Reader) Wait() {
	if r.err != nil || r.body != nil || r.r < r.w || r.srcErr != nil {
		return
	}
	r.idle() // between records with nothing read ahead: wait in the small buffer
	if err := r.fill(); err != nil && r.srcErr == nil {
		r.srcErr = err // kept for the next call, as fill keeps the source's errors
	}
}

// NextRecord returns the next record with its size and position. With StreamLargerRecords,
// a record longer than MaxRecordSize comes back with a Body to read instead of Data.
func (r *Reader) NextRecord() (Record, error) {
	return r.next(true)
}

func (r *Reader) next(allowStream bool) (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	if r.body != nil {
		if err := r.body.discard(); err != nil {
			return Record{}, err
		}
	}
	size, off, err := r.readHeader()
	if err != nil {
		return Record{}, r.fail(err)
	}
	if size > uint64(r.max) {
		if allowStream && r.streamMax > 0 && size <= uint64(r.streamMax) {
			r.body = &body{rd: r, remaining: int64(size), size: int64(size), off: off, index: r.records}
			rec := Record{Body: r.body, Size: int64(size), Offset: off, Index: r.records}
			r.records++
			return rec, nil
		}
		limit := int64(r.max)
		if allowStream && r.streamMax > limit {
			limit = r.streamMax
		}
		return Record{}, r.fail(&Error{Err: ErrRecordTooLarge, Offset: off, Record: r.records,
			Detail: fmt.Sprintf("record of %d bytes exceeds the limit of %d bytes", size, limit)})
	}
	n := int(size)
	if err := r.need(n, off); err != nil {
		return Record{}, r.fail(err)
	}
	data := r.buf[r.r : r.r+n : r.r+n]
	r.r += n
	rec := Record{Data: data, Size: int64(n), Offset: off, Index: r.records}
	r.records++
	return rec, nil
}

func (r *Reader) fail(err error) error {
	r.err = err
	r.idle() // the buffer is of no further use: every later call returns err
	return err
}

// readHeader consumes empty lines and one header line, returning the record size and
// the header's byte offset.
func (r *Reader) readHeader() (uint64, int64, error) {
	for {
		win := r.buf[r.r:r.w]
		look := win
		if len(look) > MaxHeaderLine+1 {
			look = look[:MaxHeaderLine+1]
		}
		i := bytes.IndexByte(look, '\n')
		if i < 0 {
			if len(win) == 0 {
				// Between records with nothing read ahead: wait in the small buffer.
				r.idle()
			}
			off := r.base + int64(r.r)
			if len(win) > MaxHeaderLine {
				return 0, off, &Error{Err: ErrBadHeader, Offset: off, Record: r.records,
					Detail: fmt.Sprintf("no line feed within %d bytes: %q", MaxHeaderLine, clip(win))}
			}
			err := r.fill()
			if err == nil {
				continue
			}
			if err != io.EOF {
				return 0, off, r.sourceError(err, off)
			}
			if len(trimSpace(win)) == 0 {
				return 0, off, io.EOF
			}
			return 0, off, &Error{Err: ErrTruncated, Offset: off, Record: r.records,
				Detail: fmt.Sprintf("input ended inside the header %q", clip(win))}
		}
		off := r.base + int64(r.r)
		line := win[:i]
		size, blank, detail := parseSize(line)
		if detail != "" {
			return 0, off, &Error{Err: ErrBadHeader, Offset: off, Record: r.records,
				Detail: fmt.Sprintf("%s in %q", detail, clip(line))}
		}
		r.r += i + 1
		if !blank {
			return size, off, nil
		}
	}
}

// parseSize reads a header line (without its LF). blank reports a line of only white
// space; detail is non-empty when the line is not a valid size.
func parseSize(line []byte) (size uint64, blank bool, detail string) {
	digits := trimSpace(line)
	if len(digits) == 0 {
		return 0, true, ""
	}
	if len(digits) > maxDigits {
		return 0, false, fmt.Sprintf("%d digits, more than the %d a uint64 can have", len(digits), maxDigits)
	}
	for i, c := range digits {
		d := c - '0'
		if d > 9 {
			return 0, false, fmt.Sprintf("byte %q at position %d is not a decimal digit", c, i)
		}
		if size > (^uint64(0)-uint64(d))/10 {
			return 0, false, "the size overflows a uint64"
		}
		size = size*10 + uint64(d)
	}
	return size, false, ""
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// need makes sure buf[r:r+n] holds the next n bytes of input.
func (r *Reader) need(n int, off int64) error {
	for r.w-r.r < n {
		if r.r+n > len(r.buf) {
			r.makeRoom(n)
		}
		if err := r.fill(); err != nil {
			if err == io.EOF {
				return &Error{Err: ErrTruncated, Offset: off, Record: r.records,
					Detail: fmt.Sprintf("input ended after %d of the record's %d bytes", r.w-r.r, n)}
			}
			return r.sourceError(err, off)
		}
	}
	return nil
}

// makeRoom moves the unread input to the front of the buffer, growing it when it
// cannot hold n bytes. The small buffer is left for a pooled one: room is wanted when
// input keeps coming (a record or header continues past what was read).
func (r *Reader) makeRoom(n int) {
	if n > len(r.buf) || r.held == nil {
		size := max(2*len(r.buf), r.initial, n)
		if size&(size-1) != 0 {
			size = 1 << bits.Len(uint(size)) // a pool size class
		}
		if limit := r.max + MaxHeaderLine + 1; size > limit && n <= limit {
			size = max(limit, r.initial)
		}
		box := takeBuffer(size)
		nb := *box
		copy(nb, r.buf[r.r:r.w])
		if r.held != nil {
			giveBuffer(r.held)
		}
		r.held, r.buf = box, nb
	} else {
		copy(r.buf, r.buf[r.r:r.w])
	}
	r.base += int64(r.r)
	r.w -= r.r
	r.r = 0
}

// fill reads more input into the buffer. It returns nil when at least one byte arrived.
func (r *Reader) fill() error {
	if r.srcErr != nil {
		return r.srcErr
	}
	if r.buf == nil {
		r.buf = r.small[:]
	}
	if r.w == len(r.buf) {
		// A full small buffer means input keeps coming: take a pooled one.
		if r.r == 0 || r.held == nil {
			r.makeRoom(len(r.buf) + 1)
		} else {
			r.makeRoom(r.w - r.r)
		}
	}
	for range 100 {
		n, err := r.src.Read(r.buf[r.w:])
		if n < 0 || n > len(r.buf)-r.w {
			return errors.New("recordio: the source reader returned an invalid count")
		}
		r.w += n
		if err != nil {
			r.srcErr = err
			if n > 0 {
				return nil
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	r.srcErr = io.ErrNoProgress
	return io.ErrNoProgress
}

// rewind empties the buffer without losing track of stream offsets.
func (r *Reader) rewind() {
	r.base += int64(r.r)
	r.r, r.w = 0, 0
}

// idle empties the buffer and gives a pooled one back: the Reader waits for input in
// its small buffer. Records returned before are only valid until the next call, which
// is this one or later.
func (r *Reader) idle() {
	r.rewind()
	if r.held != nil {
		giveBuffer(r.held)
		r.held = nil
	}
	r.buf = r.small[:]
}

func (r *Reader) sourceError(err error, off int64) error {
	return &Error{Err: err, Offset: off, Record: r.records, Detail: "reading the stream"}
}

// body streams one record longer than the in-memory limit.
type body struct {
	rd        *Reader
	remaining int64
	size      int64
	off       int64
	index     int64
	err       error
}

// ErrBodyClosed is returned by a record's Body once the Reader has moved past it.
var ErrBodyClosed = errors.New("recordio: record body read after the reader moved to the next record")

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		return 0, io.EOF
	}
	rd := b.rd
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	if rd.w == rd.r {
		if rd.srcErr == nil && len(p) >= len(rd.buf) {
			// Large reads go straight to the source, skipping our buffer.
			n, err := rd.src.Read(p)
			b.remaining -= int64(n)
			rd.base += int64(n)
			if err != nil {
				rd.srcErr = err
				if n > 0 {
					return n, nil
				}
				return 0, b.fail(err)
			}
			return n, nil
		}
		rd.rewind()
		if err := rd.fill(); err != nil {
			return 0, b.fail(err)
		}
	}
	n := copy(p, rd.buf[rd.r:rd.w])
	rd.r += n
	b.remaining -= int64(n)
	return n, nil
}

func (b *body) fail(err error) error {
	rd := b.rd
	if err == io.EOF {
		err = &Error{Err: ErrTruncated, Offset: b.off, Record: b.index,
			Detail: fmt.Sprintf("input ended after %d of the record's %d bytes", b.size-b.remaining, b.size)}
	} else {
		err = rd.sourceError(err, b.off)
	}
	b.err = err
	rd.err = err
	return err
}

// discard skips what is left of the body and detaches it from the Reader.
func (b *body) discard() error {
	for b.remaining > 0 && b.err == nil {
		rd := b.rd
		if rd.w > rd.r {
			n := int(min(int64(rd.w-rd.r), b.remaining))
			rd.r += n
			b.remaining -= int64(n)
			continue
		}
		rd.rewind()
		if rd.held == nil {
			// Skip in large reads, not in the small buffer's.
			rd.makeRoom(rd.initial)
		}
		if err := rd.fill(); err != nil {
			b.fail(err)
		}
	}
	b.rd.body = nil
	if b.err != nil {
		return b.err
	}
	b.err = ErrBodyClosed
	return nil
}
