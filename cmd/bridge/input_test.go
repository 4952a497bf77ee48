package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// readAll drains src into "where=data" or "where!problem" lines, and the error that
// ended it (nil at io.EOF).
func readAll(t *testing.T, src source) ([]string, error) {
	t.Helper()
	var out []string
	for {
		rec, err := src.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if rec.bad != nil {
			out = append(out, rec.where+"!"+rec.bad.Error())
			continue
		}
		out = append(out, rec.where+"="+string(rec.data))
	}
}

func stdinSource(t *testing.T, format, input string) source {
	t.Helper()
	src, err := newSource(format, inputs(nil, strings.NewReader(input)))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// A JSON-lines record is named by the line an editor shows for it: blank lines are
// skipped but counted, a CRLF ending is not part of the record, and a line that is not
// one JSON value keeps its number and says why, quoting the line.
func TestJSONLinesNamesEachRecordByItsLine(t *testing.T) {
	in := "{\"a\":1}\n\n  \r\n[1,2]\r\nnot json\n{\"b\":2} {\"c\":3}\n\"text\"\n{\"last\":true}"
	got, err := readAll(t, stdinSource(t, formatJSON, in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`stdin:1={"a":1}`,
		`stdin:4=[1,2]`,
		`stdin:5!not JSON: invalid character 'o' in literal null (expecting 'u') in "not json"`,
		`stdin:6!not JSON: more than one JSON value on the line in "{\"b\":2} {\"c\":3}"`,
		`stdin:7="text"`,
		`stdin:8={"last":true}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A line longer than the limit is refused by its number and skipped to its end; the
// lines after it are read as usual, however the buffer's fragments fell.
func TestJSONLinesRefusesALineLongerThanTheLimitAndReadsOn(t *testing.T) {
	old := maxInputRecord
	maxInputRecord = 100 << 10 // above the 64 KiB read buffer: the long line comes in fragments
	t.Cleanup(func() { maxInputRecord = old })
	fits := `"` + strings.Repeat("x", maxInputRecord-2) + `"`
	long := `"` + strings.Repeat("y", maxInputRecord) + `"`
	in := fits + "\r\n" + long + "\n{\"after\":1}\n" + long
	got, err := readAll(t, stdinSource(t, formatJSON, in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] != "stdin:1="+fits || !strings.HasPrefix(got[1], "stdin:2!longer than") ||
		got[2] != `stdin:3={"after":1}` || !strings.HasPrefix(got[3], "stdin:4!longer than") {
		for i := range got {
			got[i] = got[i][:min(len(got[i]), 60)]
		}
		t.Fatalf("got %q", got)
	}
}

// Files are read in the order given, each line named by its file; "-" is stdin.
func TestInputsAreReadInOrderAndNamedByFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	if err := os.WriteFile(a, []byte("1\n2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("\n3"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := newSource(formatJSON, inputs([]string{a, "-", b}, strings.NewReader("4\n")))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, src)
	if err != nil {
		t.Fatal(err)
	}
	want := a + ":1=1," + a + ":2=2,stdin:1=4," + b + ":2=3"
	if strings.Join(got, ",") != want {
		t.Fatalf("got %q, want %q", strings.Join(got, ","), want)
	}
	// A file that cannot be opened ends the input, after what came before it.
	src, _ = newSource(formatJSON, inputs([]string{a, filepath.Join(dir, "missing")}, nil))
	got, err = readAll(t, src)
	if len(got) != 2 || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %q, %v; want a's two records, then the missing file's error", got, err)
	}
}

// RecordIO input keeps every byte of each record (line feeds, nothing trimmed) and
// names it by its index; a broken frame ends the input with the offset, since nothing
// after it has a known boundary.
func TestRecordIOInputNamesRecordsAndStopsAtABrokenFrame(t *testing.T) {
	var in []byte
	for _, r := range []string{"a\nb", "", "  x  "} {
		in = recordio.AppendRecord(in, []byte(r))
	}
	got, err := readAll(t, stdinSource(t, formatRecordIO, string(in)+"12x\nrest"))
	want := []string{"stdin: record 0=a\nb", "stdin: record 1=", "stdin: record 2=  x  "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !errors.Is(err, recordio.ErrBadHeader) || !strings.Contains(err.Error(), "stdin: ") || !strings.Contains(err.Error(), "record 3") {
		t.Fatalf("the broken frame: %v", err)
	}
}

// With -format raw each file is one record, byte for byte; stdin is one record too.
func TestRawInputIsOneRecordPerFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.bin")
	if err := os.WriteFile(a, []byte("\x00\x01\n\xff"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := newSource(formatRaw, inputs([]string{a, "-"}, strings.NewReader("line 1\nline 2\n")))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a + "=\x00\x01\n\xff", "stdin=line 1\nline 2\n"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	old := maxInputRecord
	maxInputRecord = 3
	t.Cleanup(func() { maxInputRecord = old })
	src, _ = newSource(formatRaw, inputs([]string{a}, nil))
	if got, _ := readAll(t, src); len(got) != 1 || !strings.HasPrefix(got[0], a+"!longer than") {
		t.Fatalf("a file above the limit: %q", got)
	}
}

func TestUnknownInputFormatIsNamed(t *testing.T) {
	if _, err := newSource("csv", nil); err == nil || !strings.Contains(err.Error(), `"csv"`) {
		t.Fatalf("err %v", err)
	}
}
