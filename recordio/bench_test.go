package recordio

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

var benchSizes = []int{64, 1 << 10, 64 << 10}

// stream returns about 8 MiB of records of the given size (at least 16 records).
func stream(size int) ([]byte, int) {
	n := max(16, (8<<20)/size)
	rec := bytes.Repeat([]byte{'r'}, size)
	var b []byte
	for range n {
		b = AppendRecord(b, rec)
	}
	return b, n
}

// BenchmarkReaderMemory decodes records from an in-memory stream; one op is one record.
func BenchmarkReaderMemory(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			data, _ := stream(size)
			src := bytes.NewReader(data)
			rd := NewReader(src, BufferSize(256<<10))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				rec, err := rd.Next()
				if err == io.EOF {
					src.Reset(data)
					rd = NewReader(src, BufferSize(256<<10))
					rec, err = rd.Next()
				}
				if err != nil || len(rec) != size {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriter encodes records into a buffer that is flushed to io.Discard.
func BenchmarkWriter(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			rec := bytes.Repeat([]byte{'w'}, size)
			w := NewWriter(io.Discard)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for range b.N {
				if err := w.Write(rec); err != nil {
					b.Fatal(err)
				}
			}
			_ = w.Flush()
		})
	}
}

// BenchmarkHTTPBody reads a stream of b.N records through a real chunked HTTP/1.1
// response on loopback: "decode" with the Reader, "discard" reading the body alone (the
// floor). Their ratio is the decoder's cost on the HTTP path. Both read the body 64 KiB
// at a time (the floor through a 64 KiB buffer of its own: io.Copy to io.Discard would
// read 8 KiB at a time and make the floor slower than decoding at large records).
func BenchmarkHTTPBody(b *testing.B) {
	for _, size := range benchSizes {
		for _, mode := range []string{"discard", "decode"} {
			b.Run(fmt.Sprintf("%dB/%s", size, mode), func(b *testing.B) {
				rec := AppendRecord(nil, bytes.Repeat([]byte{'h'}, size))
				url, stop := chunkedServer(b, rec)
				defer stop()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				resp, err := http.Get(url + "?n=" + strconv.Itoa(b.N))
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				if mode == "discard" {
					if n, err := discard(resp.Body, benchReadSize); err != nil || n != int64(len(rec))*int64(b.N) {
						b.Fatalf("read %d bytes, %v", n, err)
					}
					return
				}
				rd := NewReader(resp.Body, BufferSize(benchReadSize))
				for range b.N {
					if r, err := rd.Next(); err != nil || len(r) != size {
						b.Fatal(err)
					}
				}
				if _, err := rd.Next(); err != io.EOF {
					b.Fatal(err)
				}
			})
		}
	}
}

// benchReadSize is how much both sides of BenchmarkHTTPBody ask the body for at a time.
const benchReadSize = 64 << 10

// discard reads r to its end through a buffer of size bytes, as the decoder reads it.
func discard(r io.Reader, size int) (int64, error) {
	buf := make([]byte, size)
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// chunkedServer serves n copies of rec per request in a chunked response, 32 KiB a chunk.
func chunkedServer(b *testing.B, rec []byte) (string, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", MediaRecordIO)
		chunk := make([]byte, 0, 32<<10)
		for range n {
			if len(chunk)+len(rec) > cap(chunk) && len(chunk) > 0 {
				w.Write(chunk)
				chunk = chunk[:0]
			}
			if len(rec) > cap(chunk) {
				w.Write(rec)
				continue
			}
			chunk = append(chunk, rec...)
		}
		w.Write(chunk)
	})}
	go srv.Serve(l)
	return "http://" + l.Addr().String(), func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	}
}
