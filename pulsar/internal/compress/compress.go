// Package compress implements the payload codecs of the Pulsar protocol: LZ4 (raw
// block format), ZLIB, ZSTD and Snappy (block format). Compression covers a whole
// payload: one message or a whole batch.
package compress

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// ErrCorrupt: a payload that does not decompress to its announced size.
var ErrCorrupt = errors.New("pulsar: corrupt compressed payload")

// Compress appends the compressed form of src to dst.
func Compress(kind pb.CompressionType, dst, src []byte) ([]byte, error) {
	switch kind {
	case pb.CompressionType_NONE:
		return append(dst, src...), nil
	case pb.CompressionType_LZ4:
		start := len(dst)
		dst = grow(dst, lz4.CompressBlockBound(len(src)))
		var c lz4.Compressor
		n, err := c.CompressBlock(src, dst[start:])
		if err != nil {
			return dst[:start], err
		}
		if n == 0 && len(src) > 0 {
			return dst[:start], errors.New("pulsar: lz4 could not compress the payload")
		}
		return dst[:start+n], nil
	case pb.CompressionType_ZLIB:
		buf := bytes.NewBuffer(dst)
		w := zlibWriters.Get().(*zlib.Writer)
		w.Reset(buf)
		_, err := w.Write(src)
		if err == nil {
			err = w.Close()
		}
		zlibWriters.Put(w)
		return buf.Bytes(), err
	case pb.CompressionType_ZSTD:
		return zstdEncoder.EncodeAll(src, dst), nil
	case pb.CompressionType_SNAPPY:
		start := len(dst)
		dst = grow(dst, snappy.MaxEncodedLen(len(src)))
		out := snappy.Encode(dst[start:], src)
		return dst[:start+len(out)], nil
	}
	return dst, fmt.Errorf("pulsar: unknown compression type %d", kind)
}

// Decompress returns src decompressed into a buffer of exactly size bytes. size comes
// from the wire: it is checked against limit (the broker's message size limit, or the
// consumer's for a chunked message) before anything is allocated, and no codec is let
// produce more than about limit bytes whatever src says.
func Decompress(kind pb.CompressionType, src []byte, size, limit int) ([]byte, error) {
	if kind == pb.CompressionType_NONE {
		return src, nil
	}
	if size < 0 || size > limit {
		return nil, fmt.Errorf("%w: announced uncompressed size %d is out of range (the limit is %d)", ErrCorrupt, size, limit)
	}
	out := make([]byte, size)
	var n int
	var err error
	switch kind {
	case pb.CompressionType_LZ4:
		n, err = lz4.UncompressBlock(src, out)
	case pb.CompressionType_ZLIB:
		var r io.ReadCloser
		r, err = zlib.NewReader(bytes.NewReader(src))
		if err == nil {
			n, err = io.ReadFull(r, out)
			if err == nil {
				// The stream must end here: this also verifies zlib's checksum.
				var one [1]byte
				if m, err2 := r.Read(one[:]); m > 0 {
					err = errors.New("more data than the announced size")
				} else if err2 != io.EOF {
					err = err2
				}
			}
			r.Close()
		}
	case pb.CompressionType_ZSTD:
		var got []byte
		got, err = zstdDecoder(limit).DecodeAll(src, out[:0])
		n = len(got)
		if err == nil && n == size && size > 0 {
			out = got // DecodeAll may have reallocated
		}
	case pb.CompressionType_SNAPPY:
		var l int
		l, err = snappy.DecodedLen(src)
		if err == nil && l != size {
			err = fmt.Errorf("snappy says %d bytes", l)
		}
		if err == nil {
			var got []byte
			got, err = snappy.Decode(out, src)
			n = len(got)
		}
	default:
		return nil, fmt.Errorf("%w: unknown compression type %d", ErrCorrupt, kind)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%s): %v", ErrCorrupt, kind, err)
	}
	if n != size {
		return nil, fmt.Errorf("%w (%s): %d bytes, metadata says %d", ErrCorrupt, kind, n, size)
	}
	return out, nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

var (
	zlibWriters    = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}
	zstdEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	// zstdDecoders[k] refuses to produce more than 1<<k bytes: a frame without a content
	// size (or lying about it) must not grow the output beyond the caller's limit.
	zstdDecoders [64]struct {
		once sync.Once
		d    *zstd.Decoder
	}
)

// zstdDecoder returns the shared decoder bounded by the smallest power of two >= limit
// (at least 64 KiB), so there are few of them; the exact size is checked after decoding.
func zstdDecoder(limit int) *zstd.Decoder {
	k := max(16, bits.Len64(uint64(max(limit, 1)-1)))
	e := &zstdDecoders[k]
	e.once.Do(func() {
		e.d, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(1)<<k))
	})
	return e.d
}
