package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// JSON lines print a JSON record as it is, on one line (a record spanning lines is made
// compact), other UTF-8 text as a JSON string, and refuse bytes that are neither rather
// than print something that does not read back as it came.
func TestJSONLinesOutputPutsEachRecordOnALine(t *testing.T) {
	var out bytes.Buffer
	s, err := newSink(outputJSON, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{`{"a": 1}`, "{\n  \"b\": [1,\r\n 2]\n}", "task t-1 failed\n", `"x"`, ""} {
		if err := s.Write([]byte(rec)); err != nil {
			t.Fatalf("%q: %v", rec, err)
		}
	}
	if err := s.Write([]byte{0xff, 0xfe}); !errors.Is(err, errNotText) {
		t.Fatalf("binary record: %v, want errNotText", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "{\"a\": 1}\n{\"b\":[1,2]}\n\"task t-1 failed\\n\"\n\"x\"\n\"\"\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// RecordIO output is the records byte for byte, framed: it reads back the same.
func TestRecordIOOutputReadsBackTheSame(t *testing.T) {
	var out bytes.Buffer
	s, err := newSink(outputRecordIO, &out)
	if err != nil {
		t.Fatal(err)
	}
	recs := []string{"a\nb", "", string([]byte{0, 0xff}), strings.Repeat("z", 70<<10)}
	for _, r := range recs {
		if err := s.Write([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	rd := recordio.NewReader(&out)
	for i, want := range recs {
		got, err := rd.Next()
		if err != nil || string(got) != want {
			t.Fatalf("record %d: %q, %v", i, got[:min(len(got), 20)], err)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the records: %v", err)
	}
}

func TestUnknownOutputIsNamed(t *testing.T) {
	if _, err := newSink("yaml", io.Discard); err == nil || !strings.Contains(err.Error(), `"yaml"`) {
		t.Fatalf("err %v", err)
	}
}
