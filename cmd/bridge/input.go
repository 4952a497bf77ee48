package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/recordio-bridge/bridge/recordio"
)

// maxInputRecord is the longest record bridge publish reads from its input: a line, a
// RecordIO record or a file. It bounds the memory an input without line feeds can take;
// the bridge itself refuses records above ingress.maxRecordBytes (4 MiB by default) with
// 413, record by record.
var maxInputRecord = 64 << 20 // a variable for the tests

// Input formats of bridge publish.
const (
	formatJSON     = "json"     // JSON lines: one JSON value a line
	formatRecordIO = "recordio" // a RecordIO stream
	formatRaw      = "raw"      // each file is one record
)

// inputRecord is one record read from the input and where it was read, for messages.
type inputRecord struct {
	data  []byte // valid until the next call to Next (the Publisher copies what it takes)
	where string // "events.jsonl:17", "stdin:3", "dump.rio: record 5", "a.bin"
	// bad is why the record is refused without being sent (a line that is not JSON, a
	// record longer than maxInputRecord). It still takes its place and its number.
	bad error
}

// errNotJSON marks a JSON-lines input line that is not one JSON value.
var errNotJSON = errors.New("not JSON")

// errTooLong marks an input record longer than maxInputRecord.
var errTooLong = errors.New("longer than the 64 MiB bridge publish reads as one record")

// source yields the input's records in order; io.EOF after the last. Any other error
// ends the input: it cannot be read on (a file that cannot be opened, a RecordIO
// stream whose framing broke).
type source interface {
	Next() (inputRecord, error)
}

// namedInput is one input: a file, or stdin as "-".
type namedInput struct {
	name string // as shown in messages: the path, or "stdin"
	open func() (io.ReadCloser, error)
}

// inputs names the files to read, stdin when there are none. "-" stands for stdin.
func inputs(files []string, stdin io.Reader) []namedInput {
	if len(files) == 0 {
		files = []string{"-"}
	}
	out := make([]namedInput, 0, len(files))
	for _, f := range files {
		if f == "-" {
			out = append(out, namedInput{name: "stdin", open: func() (io.ReadCloser, error) { return io.NopCloser(stdin), nil }})
			continue
		}
		out = append(out, namedInput{name: f, open: func() (io.ReadCloser, error) { return os.Open(f) }})
	}
	return out
}

// newSource returns the reader of format over the inputs, one after the other.
func newSource(format string, in []namedInput) (source, error) {
	switch format {
	case formatJSON:
		return &multiSource{in: in, each: newLineSource}, nil
	case formatRecordIO:
		return &multiSource{in: in, each: newRecordIOSource}, nil
	case formatRaw:
		return &rawSource{in: in}, nil
	}
	return nil, fmt.Errorf("-format %q is not json, recordio or raw", format)
}

// multiSource reads its inputs one after the other with a reader per input.
type multiSource struct {
	in   []namedInput
	each func(name string, r io.Reader) source
	cur  source
	rc   io.ReadCloser
}

func (m *multiSource) Next() (inputRecord, error) {
	for {
		if m.cur == nil {
			if len(m.in) == 0 {
				return inputRecord{}, io.EOF
			}
			rc, err := m.in[0].open()
			if err != nil {
				return inputRecord{}, err
			}
			m.rc, m.cur = rc, m.each(m.in[0].name, rc)
			m.in = m.in[1:]
		}
		rec, err := m.cur.Next()
		if err == io.EOF {
			m.rc.Close()
			m.cur, m.rc = nil, nil
			continue
		}
		if err != nil {
			m.rc.Close()
			m.cur, m.rc, m.in = nil, nil, nil
		}
		return rec, err
	}
}

// lineSource reads JSON lines: each line that is not blank is a record, numbered by
// its line in the file (blank lines count, so the number is the one an editor shows).
// A line that is not one JSON value is returned with bad set; the line is sent as is,
// without its line feed (and a carriage return before it).
type lineSource struct {
	name string
	r    *bufio.Reader
	line int
	buf  []byte
}

func newLineSource(name string, r io.Reader) source {
	return &lineSource{name: name, r: bufio.NewReaderSize(r, 64<<10)}
}

func (s *lineSource) Next() (inputRecord, error) {
	for {
		line, tooLong, err := s.readLine()
		if err != nil {
			return inputRecord{}, err
		}
		s.line++
		where := s.name + ":" + strconv.Itoa(s.line)
		if tooLong {
			return inputRecord{where: where, bad: errTooLong}, nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rec := inputRecord{data: line, where: where}
		if !json.Valid(line) {
			rec.bad = fmt.Errorf("%w: %s", errNotJSON, jsonProblem(line))
		}
		return rec, nil
	}
}

// readLine returns the next line without its line feed (and a carriage return before
// it), valid until the next call; io.EOF when nothing is left. A line longer than
// maxInputRecord is skipped to its end and reported as tooLong.
func (s *lineSource) readLine() (line []byte, tooLong bool, err error) {
	s.buf = s.buf[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if !tooLong {
			if len(s.buf)+len(frag) > maxInputRecord+2 {
				tooLong, s.buf = true, s.buf[:0]
			} else {
				s.buf = append(s.buf, frag...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(s.buf) == 0 && !tooLong {
				return nil, false, io.EOF
			}
		case err != nil:
			return nil, false, fmt.Errorf("%s: line %d: %w", s.name, s.line+1, err)
		}
		b := s.buf
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		if len(b) > maxInputRecord {
			return nil, true, nil
		}
		return b, tooLong, nil
	}
}

// jsonProblem says why line is not one JSON value, as encoding/json does, quoting the
// start of the line so the message names the value.
func jsonProblem(line []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(line))
	err := dec.Decode(&v)
	if err == nil {
		err = errors.New("more than one JSON value on the line")
	}
	return fmt.Sprintf("%v in %s", err, quoteStart(line, 40))
}

// quoteStart quotes the first n bytes of b, with "..." when it is longer.
func quoteStart(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:n])) + "..."
}

// recordIOSource reads a RecordIO stream; a record is named by its index in its input.
type recordIOSource struct {
	name string
	rd   *recordio.Reader
}

func newRecordIOSource(name string, r io.Reader) source {
	return &recordIOSource{name: name, rd: recordio.NewReader(r, recordio.MaxRecordSize(maxInputRecord), recordio.BufferSize(64<<10))}
}

func (s *recordIOSource) Next() (inputRecord, error) {
	n := s.rd.Records()
	data, err := s.rd.Next()
	if err == io.EOF {
		return inputRecord{}, io.EOF
	}
	if err != nil {
		// A broken frame cannot be read past: what follows has no known boundary.
		return inputRecord{}, fmt.Errorf("%s: %w", s.name, err)
	}
	return inputRecord{data: data, where: fmt.Sprintf("%s: record %d", s.name, n)}, nil
}

// rawSource makes each input one record.
type rawSource struct {
	in []namedInput
}

func (s *rawSource) Next() (inputRecord, error) {
	if len(s.in) == 0 {
		return inputRecord{}, io.EOF
	}
	in := s.in[0]
	s.in = s.in[1:]
	rc, err := in.open()
	if err != nil {
		return inputRecord{}, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, int64(maxInputRecord)+1))
	if err != nil {
		return inputRecord{}, fmt.Errorf("%s: %w", in.name, err)
	}
	if len(data) > maxInputRecord {
		return inputRecord{where: in.name, bad: errTooLong}, nil
	}
	return inputRecord{data: data, where: in.name}, nil
}
