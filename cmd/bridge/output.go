package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/recordio-bridge/bridge/recordio"
)

// Output forms of bridge tail.
const (
	outputJSON     = "json"     // JSON lines: each record on a line of its own
	outputRecordIO = "recordio" // the records as a RecordIO stream, byte for byte
	outputEnvelope = "envelope" // the bridge's JSON envelope of each message, a line each
)

// errNotText marks a record that JSON lines cannot hold: neither JSON nor UTF-8 text.
var errNotText = errors.New("neither JSON nor UTF-8 text; -o recordio writes it as it is, -o envelope in base64")

// sink writes the records bridge tail prints. Write may buffer; Flush pushes out what
// was written, and only what was flushed is acknowledged.
type sink interface {
	Write(rec []byte) error
	Flush() error
}

func newSink(output string, w io.Writer) (sink, error) {
	switch output {
	case outputJSON, outputEnvelope:
		return &jsonLines{w: bufio.NewWriterSize(w, 64<<10)}, nil
	case outputRecordIO:
		return recordio.NewWriter(w), nil
	}
	return nil, fmt.Errorf("-o %q is not json, recordio or envelope", output)
}

// jsonLines writes each record on a line: a JSON record as it is (made compact when it
// spans lines), any other UTF-8 text as a JSON string; a record that is neither is
// refused with errNotText, so nothing is printed that does not read back as it came.
type jsonLines struct {
	w   *bufio.Writer
	buf bytes.Buffer
}

func (j *jsonLines) Write(rec []byte) error {
	switch {
	case json.Valid(rec):
		if bytes.ContainsAny(rec, "\r\n") {
			j.buf.Reset()
			if err := json.Compact(&j.buf, rec); err != nil {
				return err
			}
			rec = j.buf.Bytes()
		}
		if _, err := j.w.Write(rec); err != nil {
			return err
		}
	case utf8.Valid(rec):
		s, err := json.Marshal(string(rec))
		if err != nil {
			return err
		}
		if _, err := j.w.Write(s); err != nil {
			return err
		}
	default:
		return errNotText
	}
	return j.w.WriteByte('\n')
}

func (j *jsonLines) Flush() error { return j.w.Flush() }
