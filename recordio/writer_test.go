package recordio

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func TestAppendRecordGolden(t *testing.T) {
	var b []byte
	for _, r := range []string{"hello!", "", " ", "13 characters"} {
		b = AppendRecord(b, []byte(r))
	}
	if got, want := string(b), "6\nhello!0\n1\n 13\n13 characters"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := string(AppendHeader(nil, 18446744073709551615)); got != "18446744073709551615\n" {
		t.Fatalf("AppendHeader = %q", got)
	}
}

func randomRecords(rng *rand.Rand, n, maxLen int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		size := rng.IntN(maxLen + 1)
		if rng.IntN(10) == 0 {
			size = 0
		}
		r := make([]byte, size)
		for j := range r {
			r[j] = byte(rng.UintN(256))
		}
		recs[i] = r
	}
	return recs
}

func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	for round := range 50 {
		maxLen := []int{0, 3, 100, 5000, 70_000}[round%5]
		recs := randomRecords(rng, 1+rng.IntN(200), maxLen)

		var appended []byte
		for _, r := range recs {
			appended = AppendRecord(appended, r)
		}
		var written bytes.Buffer
		w := NewWriter(&written)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(appended, written.Bytes()) {
			t.Fatalf("round %d: AppendRecord and Writer disagree (%d vs %d bytes)", round, len(appended), written.Len())
		}
		for mode, mk := range readers(string(appended)) {
			rd := NewReader(mk(), MaxRecordSize(maxLen))
			for i, want := range recs {
				got, err := rd.Next()
				if err != nil {
					t.Fatalf("round %d %s record %d: %v", round, mode, i, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("round %d %s record %d differs", round, mode, i)
				}
			}
			if _, err := rd.Next(); err != io.EOF {
				t.Fatalf("round %d %s: end = %v", round, mode, err)
			}
		}
	}
}

func TestWriterBuffersUntilFlush(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	if err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || w.Buffered() != 5 {
		t.Fatalf("wrote %d bytes before Flush, buffered %d", out.Len(), w.Buffered())
	}
	if err := w.Flush(); err != nil || out.String() != "3\nabc" || w.Buffered() != 0 {
		t.Fatalf("after Flush: %q, %v", out.String(), err)
	}
}

func TestWriterLargeRecordWrittenThrough(t *testing.T) {
	var out countingWriter
	w := NewWriter(&out)
	big := bytes.Repeat([]byte("q"), 200_000)
	if err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := AppendRecord(AppendRecord(nil, []byte("x")), big)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatal("output differs")
	}
	if out.writes != 2 {
		t.Fatalf("%d writes, want 2 (buffer with header, then the record itself)", out.writes)
	}
}

type countingWriter struct {
	bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) { c.writes++; return c.Buffer.Write(p) }

func TestWriterErrorIsSticky(t *testing.T) {
	boom := errors.New("broken pipe")
	w := NewWriter(errWriter{boom})
	_ = w.Write([]byte("a"))
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v", err)
	}
	if err := w.Write([]byte("b")); !errors.Is(err, boom) {
		t.Fatalf("Write after failure = %v", err)
	}
	if err := NewWriter(shortWriter{}).Write(bytes.Repeat([]byte("a"), 100_000)); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("short write = %v", err)
	}
}

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }
