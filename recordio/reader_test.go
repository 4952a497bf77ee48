package recordio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// splitReader returns the input in pieces of random length (1 to 7 bytes), so headers
// and records straddle reads in every possible way.
type splitReader struct {
	data []byte
	rng  *rand.Rand
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+s.rng.IntN(7), len(p), len(s.data))
	copy(p, s.data[:n])
	s.data = s.data[n:]
	return n, nil
}

// readers gives the three ways every table case is read.
func readers(input string) map[string]func() io.Reader {
	return map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(input) },
		"one-byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(input)) },
		"splits": func() io.Reader {
			return &splitReader{data: []byte(input), rng: rand.New(rand.NewPCG(1, uint64(len(input))))}
		},
	}
}

func readAll(rd *Reader) ([]string, error) {
	var out []string
	for {
		rec, err := rd.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(rec))
	}
}

func TestReaderRules(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		input   string
		opts    []Option
		want    []string
		wantErr error  // nil means a clean io.EOF
		offset  int64  // byte offset the error must name
		detail  string // substring of the error message
	}{
		{name: "spec example", input: "6\nhello!0\n1\n 13\n13 characters", want: []string{"hello!", "", " ", "13 characters"}},
		{name: "empty stream", input: "", want: nil},
		{name: "zero-length record is a record", input: "0\n0\n", want: []string{"", ""}},
		{name: "binary payload with LF inside", input: "3\na\nb", want: []string{"a\nb"}},
		{name: "empty header lines skipped", input: "\n\n2\nhi\n\n3\nyes", want: []string{"hi", "yes"}},
		{name: "white-space-only lines skipped", input: " \t\r\n2\nhi", want: []string{"hi"}},
		{name: "spaces tabs and CR around digits", input: " 2\t\r\nhi\t 3 \nyes", want: []string{"hi", "yes"}},
		{name: "CRLF header", input: "2\r\nhi", want: []string{"hi"}},
		{name: "trailing empty lines are clean", input: "2\nhi\n\n", want: []string{"hi"}},
		{name: "leading zeros", input: "0002\nhi", want: []string{"hi"}},
		{name: "twenty digits fit", input: "00000000000000000002\nhi", want: []string{"hi"}},
		{name: "exactly the maximum", input: "4\nabcd", opts: []Option{MaxRecordSize(4)}, want: []string{"abcd"}},

		{name: "no digits", input: "abc\nxyz", wantErr: ErrBadHeader, offset: 0, detail: `byte 'a' at position 0`},
		{name: "sign", input: "+5\nhello", wantErr: ErrBadHeader, detail: `byte '+'`},
		{name: "negative", input: "2\nhi-1\n", want: []string{"hi"}, wantErr: ErrBadHeader, offset: 4, detail: `byte '-'`},
		{name: "hex", input: "0x10\n0123456789abcdef", wantErr: ErrBadHeader, detail: `byte 'x' at position 1`},
		{name: "digits with inner space", input: "1 2\nabcdefghijkl", wantErr: ErrBadHeader, detail: `byte ' ' at position 1`},
		{name: "21 digits", input: "000000000000000000002\nhi", wantErr: ErrBadHeader, detail: "21 digits"},
		{name: "uint64 overflow", input: "18446744073709551616\n", wantErr: ErrBadHeader, detail: "overflows"},
		{name: "no line feed within the cap", input: strings.Repeat("1", 70), wantErr: ErrBadHeader, detail: "no line feed within 64 bytes"},
		{name: "long white space is bounded too", input: strings.Repeat(" ", 100) + "1\nx", wantErr: ErrBadHeader, detail: "no line feed"},
		{name: "header after good records names its offset", input: "2\nhi3\nyesZ\n", want: []string{"hi", "yes"}, wantErr: ErrBadHeader, offset: 9},

		{name: "too large", input: "5\nhello", opts: []Option{MaxRecordSize(4)}, wantErr: ErrRecordTooLarge, detail: "record of 5 bytes exceeds the limit of 4 bytes"},
		{name: "too large after a good one", input: "1\na100\n" + long, opts: []Option{MaxRecordSize(10)}, want: []string{"a"}, wantErr: ErrRecordTooLarge, offset: 3},
		{name: "huge size is refused before allocating", input: "18446744073709551615\n", wantErr: ErrRecordTooLarge},

		{name: "truncated header", input: "2\nhi12", want: []string{"hi"}, wantErr: ErrTruncated, offset: 4, detail: `inside the header "12"`},
		{name: "truncated record", input: "10\nabc", wantErr: ErrTruncated, offset: 0, detail: "after 3 of the record's 10 bytes"},
		{name: "truncated after header", input: "5\n", wantErr: ErrTruncated, detail: "after 0 of the record's 5 bytes"},
	}
	for _, tc := range tests {
		for mode, mk := range readers(tc.input) {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				rd := NewReader(mk(), tc.opts...)
				got, err := readAll(rd)
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("records = %q, want %q", got, tc.want)
				}
				if tc.wantErr == nil {
					if err != io.EOF {
						t.Fatalf("err = %v, want io.EOF", err)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				var re *Error
				if !errors.As(err, &re) {
					t.Fatalf("err %T is not a *recordio.Error", err)
				}
				if re.Offset != tc.offset {
					t.Errorf("offset = %d, want %d (%v)", re.Offset, tc.offset, err)
				}
				if re.Record != int64(len(tc.want)) {
					t.Errorf("record index = %d, want %d", re.Record, len(tc.want))
				}
				if !strings.Contains(err.Error(), tc.detail) || !strings.Contains(err.Error(), fmt.Sprintf("byte offset %d", tc.offset)) {
					t.Errorf("message %q lacks %q or the offset", err, tc.detail)
				}
				// Failed for good: the same error again, whatever follows.
				if _, err2 := rd.Next(); err2 != err {
					t.Fatalf("second call returned %v, want the same error %v", err2, err)
				}
				if _, err3 := rd.NextRecord(); err3 != err {
					t.Fatalf("NextRecord after failure returned %v", err3)
				}
			})
		}
	}
}

func TestReaderSourceErrorIsStickyAndWrapped(t *testing.T) {
	boom := errors.New("connection reset")
	rd := NewReader(io.MultiReader(strings.NewReader("2\nhi3\nab"), iotest.ErrReader(boom)))
	got, err := readAll(rd)
	if fmt.Sprint(got) != "[hi]" || !errors.Is(err, boom) {
		t.Fatalf("got %q, %v; want [hi] and the source error", got, err)
	}
	var re *Error
	if !errors.As(err, &re) || re.Offset != 4 || re.Record != 1 {
		t.Fatalf("error %v does not place the failure at record 1, offset 4", err)
	}
	if _, err2 := rd.Next(); err2 != err {
		t.Fatalf("not sticky: %v", err2)
	}
}

func TestReaderNoProgressSource(t *testing.T) {
	rd := NewReader(zeroReader{})
	if _, err := rd.Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderDataWithEOFIsUsed(t *testing.T) {
	// A source may return the last bytes together with io.EOF.
	rd := NewReader(iotest.DataErrReader(strings.NewReader("2\nhi1\nx")))
	got, err := readAll(rd)
	if fmt.Sprint(got) != "[hi x]" || err != io.EOF {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestReaderOffsetsAndIndexes(t *testing.T) {
	rd := NewReader(strings.NewReader("\n2\nhi0\n\n3\nyes"))
	want := []Record{{Size: 2, Offset: 1, Index: 0}, {Size: 0, Offset: 5, Index: 1}, {Size: 3, Offset: 8, Index: 2}}
	for _, w := range want {
		rec, err := rd.NextRecord()
		if err != nil {
			t.Fatal(err)
		}
		if rec.Size != w.Size || rec.Offset != w.Offset || rec.Index != w.Index || rec.Body != nil || int64(len(rec.Data)) != rec.Size {
			t.Fatalf("record %+v, want %+v", rec, w)
		}
	}
	if rd.Records() != 3 || rd.Offset() != 13 {
		t.Fatalf("Records()=%d Offset()=%d, want 3 and 13", rd.Records(), rd.Offset())
	}
}

func TestReaderReturnedSliceCannotClobberTheBuffer(t *testing.T) {
	rd := NewReader(strings.NewReader("2\nhi3\nyes"))
	rec, _ := rd.Next()
	rec = append(rec, "XXXX"...) // must not overwrite "3\nyes"
	_ = rec
	next, err := rd.Next()
	if err != nil || string(next) != "yes" {
		t.Fatalf("next = %q, %v", next, err)
	}
}

func TestReaderStreamsLargerRecords(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 10_000) // 100 000 bytes
	var in []byte
	in = AppendRecord(in, []byte("small"))
	in = AppendRecord(in, big)
	in = AppendRecord(in, big) // skipped unread
	in = AppendRecord(in, []byte("after"))
	for mode, mk := range readers(string(in)) {
		t.Run(mode, func(t *testing.T) {
			rd := NewReader(mk(), MaxRecordSize(1000), StreamLargerRecords(1<<20), BufferSize(4096))
			r1, err := rd.NextRecord()
			if err != nil || string(r1.Data) != "small" {
				t.Fatalf("first: %+v %v", r1, err)
			}
			r2, err := rd.NextRecord()
			if err != nil || r2.Body == nil || r2.Size != int64(len(big)) || r2.Data != nil || r2.Index != 1 {
				t.Fatalf("second: %+v %v", r2, err)
			}
			got, err := io.ReadAll(r2.Body)
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("streamed body: %d bytes, %v", len(got), err)
			}
			r3, err := rd.NextRecord()
			if err != nil || r3.Body == nil {
				t.Fatalf("third: %+v %v", r3, err)
			}
			buf := make([]byte, 10)
			if _, err := io.ReadFull(r3.Body, buf); err != nil {
				t.Fatal(err)
			}
			r4, err := rd.NextRecord() // skips the rest of r3
			if err != nil || string(r4.Data) != "after" {
				t.Fatalf("fourth: %+v %v", r4, err)
			}
			if _, err := r3.Body.Read(buf); !errors.Is(err, ErrBodyClosed) {
				t.Fatalf("read of a skipped body: %v, want ErrBodyClosed", err)
			}
			if _, err := rd.NextRecord(); err != io.EOF {
				t.Fatalf("end: %v", err)
			}
			if cap(rd.buf) > 4096 { // the initial buffer; a 100 000-byte record must not grow it
				t.Fatalf("buffer grew to %d bytes for streamed records; memory is not bounded", cap(rd.buf))
			}
		})
	}
}

func TestReaderStreamedRecordTruncated(t *testing.T) {
	rd := NewReader(strings.NewReader("100\nabc"), MaxRecordSize(10), StreamLargerRecords(1000))
	rec, err := rd.NextRecord()
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rec.Body)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "after 3 of the record's 100 bytes") {
		t.Fatalf("err = %v", err)
	}
	if _, err2 := rd.NextRecord(); !errors.Is(err2, ErrTruncated) {
		t.Fatalf("reader not failed after a truncated body: %v", err2)
	}
}

func TestReaderNextRefusesStreamedSizes(t *testing.T) {
	// Next returns slices only; a record above MaxRecordSize is too large for it even
	// when NextRecord would stream it.
	rd := NewReader(strings.NewReader("100\n"+strings.Repeat("a", 100)), MaxRecordSize(10), StreamLargerRecords(1000))
	if _, err := rd.Next(); !errors.Is(err, ErrRecordTooLarge) || !strings.Contains(err.Error(), "limit of 10 bytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestReaderAboveStreamLimit(t *testing.T) {
	rd := NewReader(strings.NewReader("5000\n"), MaxRecordSize(10), StreamLargerRecords(1000))
	if _, err := rd.NextRecord(); !errors.Is(err, ErrRecordTooLarge) || !strings.Contains(err.Error(), "limit of 1000 bytes") {
		t.Fatalf("err = %v", err)
	}
}

func TestReaderBufferStaysBounded(t *testing.T) {
	// Many records of varying size: the buffer never exceeds the limit plus one header.
	const limit = 5000
	rng := rand.New(rand.NewPCG(7, 7))
	var in []byte
	for range 500 {
		in = AppendRecord(in, bytes.Repeat([]byte{'z'}, rng.IntN(limit+1)))
	}
	rd := NewReader(bytes.NewReader(in), MaxRecordSize(limit))
	n := 0
	for {
		_, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if len(rd.buf) > max(defaultBufferSize, limit+MaxHeaderLine+1) {
			t.Fatalf("buffer is %d bytes", len(rd.buf))
		}
	}
	if n != 500 {
		t.Fatalf("read %d records, want 500", n)
	}
}
