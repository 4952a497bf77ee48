package recordio

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		"", "6\nhello!0\n1\n 13\n13 characters", "0\n", "\n\n1\na", " 2 \r\nhi", "+1\na", "0x10\n",
		"18446744073709551616\n", "99999999999999999999\n", "5\nab", "12", "3\na\nb\n\n", "\t\r\n",
		"000000000000000000001\nx",
	} {
		f.Add([]byte(s))
	}
}

// FuzzReader checks that no input makes the reader panic, loop or misreport: records come
// back in order with the sizes their headers name, errors are typed and sticky, and the
// byte-at-a-time reader agrees exactly with the whole-input reader.
func FuzzReader(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, errWhole := collect(NewReader(bytes.NewReader(in), MaxRecordSize(1<<16)))
		bytewise, errByte := collect(NewReader(iotest.OneByteReader(bytes.NewReader(in)), MaxRecordSize(1<<16)))
		if len(whole) != len(bytewise) {
			t.Fatalf("whole read %d records, byte-wise %d", len(whole), len(bytewise))
		}
		for i := range whole {
			if !bytes.Equal(whole[i], bytewise[i]) {
				t.Fatalf("record %d differs between whole and byte-wise reads", i)
			}
		}
		if (errWhole == io.EOF) != (errByte == io.EOF) || (errWhole != io.EOF && errWhole.Error() != errByte.Error()) {
			t.Fatalf("errors differ: %v vs %v", errWhole, errByte)
		}
		if errWhole != io.EOF && !errors.Is(errWhole, ErrBadHeader) && !errors.Is(errWhole, ErrRecordTooLarge) && !errors.Is(errWhole, ErrTruncated) {
			t.Fatalf("untyped error %v", errWhole)
		}
		// Re-encoding what was decoded is a prefix of a canonical form of the input:
		// decoding it again gives the same records.
		var enc []byte
		for _, r := range whole {
			enc = AppendRecord(enc, r)
		}
		again, err := collect(NewReader(bytes.NewReader(enc), MaxRecordSize(1<<16)))
		if err != io.EOF || len(again) != len(whole) {
			t.Fatalf("re-decoding %d records gave %d, %v", len(whole), len(again), err)
		}
	})
}

func collect(rd *Reader) ([][]byte, error) {
	var out [][]byte
	for range 1 << 20 {
		rec, err := rd.Next()
		if err != nil {
			if _, err2 := rd.Next(); err2 != err {
				return out, errors.New("error not sticky")
			}
			return out, err
		}
		out = append(out, bytes.Clone(rec))
	}
	return out, errors.New("reader did not stop")
}

// FuzzRoundTrip checks decode(encode(records)) == records for records cut from the input.
func FuzzRoundTrip(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, '\n', 255})
	f.Fuzz(func(t *testing.T, in []byte) {
		// Cut the input into records at every byte equal to in[0] (a varied, data-driven split).
		var recs [][]byte
		if len(in) > 0 {
			recs = bytes.Split(in[1:], in[:1])
		}
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		got, err := collect(NewReader(iotest.HalfReader(bytes.NewReader(buf.Bytes()))))
		if err != io.EOF || len(got) != len(recs) {
			t.Fatalf("decoded %d of %d records, %v", len(got), len(recs), err)
		}
		for i := range recs {
			if !bytes.Equal(got[i], recs[i]) {
				t.Fatalf("record %d differs", i)
			}
		}
	})
}
