package recordio

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestWaitLeavesWhatItReadToNext(t *testing.T) {
	// Wait reads ahead only: what it read, and an end or error it met, come out of the
	// next call as they would have without it, one byte per read or all at once.
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		src     func() io.Reader
		records []string
		end     error // io.EOF, or an error Next's error wraps
	}{
		{"clean end", func() io.Reader { return strings.NewReader("1\na\n2\nbc") }, []string{"a", "bc"}, io.EOF},
		{"clean end, a byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader("1\na\n2\nbc")) }, []string{"a", "bc"}, io.EOF},
		{"empty", func() io.Reader { return strings.NewReader("") }, nil, io.EOF},
		{"source error between records", func() io.Reader {
			return io.MultiReader(strings.NewReader("1\na"), iotest.ErrReader(boom))
		}, []string{"a"}, boom},
		{"source error with data", func() io.Reader { return iotest.DataErrReader(strings.NewReader("1\na")) }, []string{"a"}, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := NewReader(tc.src())
			var got []string
			var err error
			for {
				rd.Wait()
				rd.Wait() // a second Wait with input at hand, or after the end, reads nothing
				var rec []byte
				if rec, err = rd.Next(); err != nil {
					break
				}
				got = append(got, string(rec))
			}
			if strings.Join(got, ",") != strings.Join(tc.records, ",") {
				t.Fatalf("records %q, want %q", got, tc.records)
			}
			if !errors.Is(err, tc.end) {
				t.Fatalf("ended with %v, want %v", err, tc.end)
			}
			if tc.end == io.EOF && err != io.EOF {
				t.Fatalf("ended with %v, want io.EOF itself (a clean record boundary)", err)
			}
		})
	}
}
