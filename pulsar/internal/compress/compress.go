// Package compress implements the payload codecs of the Pulsar protocol: LZ4 (raw
// block format), ZLIB, ZSTD and Snappy (block format). Compression covers a whole
// payload: one message or a whole batch.
package compress

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
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
// consumer's for a chunked message), and against what src can expand to under its codec's
// format and what its header says (checkExpansion), before anything is allocated; no
// codec is let produce more than size bytes whatever src says. Each codec takes what the Java client
// writes (testdata/java): for ZLIB, a stream it flushed and never finished (see inflate).
func Decompress(kind pb.CompressionType, src []byte, size, limit int) ([]byte, error) {
	if kind == pb.CompressionType_NONE {
		return src, nil
	}
	if err := Check(kind, src, size, limit); err != nil {
		return nil, err
	}
	out := make([]byte, size)
	var n int
	var err error
	switch kind {
	case pb.CompressionType_LZ4:
		n, err = lz4.UncompressBlock(src, out)
	case pb.CompressionType_ZLIB:
		n, err = inflate(src, out)
	case pb.CompressionType_ZSTD:
		var got []byte
		got, err = zstdDecoder(limit).DecodeAll(src, out[:0])
		n = len(got)
		if err == nil && n == size && size > 0 {
			out = got // out's own array: the decoder is capped to its capacity
		}
	case pb.CompressionType_SNAPPY:
		var got []byte
		// Strict: the s2 extensions klauspost's Decode also takes are not Snappy.
		got, err = snappy.DecodeStrict(out, src)
		n = len(got)
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

// Check does what Decompress checks before it allocates: that size is within limit and
// that src can decompress to it under its codec's format and its header. A consumer
// checks it before it waits for budget to decompress src.
func Check(kind pb.CompressionType, src []byte, size, limit int) error {
	if kind == pb.CompressionType_NONE {
		return nil
	}
	if size < 0 || size > limit {
		return fmt.Errorf("%w: announced uncompressed size %d is out of range (the limit is %d)", ErrCorrupt, size, limit)
	}
	if err := checkExpansion(kind, src, size); err != nil {
		return fmt.Errorf("%w (%s): %v", ErrCorrupt, kind, err)
	}
	return nil
}

// The most each codec's format can expand one byte of payload to, so that an announced
// size no payload of that length can reach is refused before its buffer is made (a few
// bytes announcing the chunked-message limit would otherwise cost that much memory,
// outside any budget, on the connection's reader). Every bound is the format's own, not
// an encoder's habit: what any encoder writes, Java's included, stays within it.
const (
	// LZ4 block format: a sequence is a token (4 bits of literal length, 4 of match
	// length), L literals (with an extra byte per 255 of them beyond 15), a 2-byte offset
	// and m extra match-length bytes of at most 255 each. It costs at least 3+L+m bytes and
	// yields at most L + 4+15 + 255m, less than 255 times its cost; the last sequence,
	// literals only, yields L from 1+L bytes. So out <= 255 * len(src).
	lz4MaxRatio = 255
	// Deflate (RFC 1951): every output byte comes from a literal code (at least 1 bit per
	// byte), a length/distance pair (at least 1+1 bits for at most 258 bytes) or a stored
	// block (a byte per byte after its header): at most 129 bytes per bit, 1032 per byte
	// of deflate data, which is the zlib stream less its 2-byte header. The usual
	// "1032:1 plus a constant" is this bound less the block headers.
	deflateMaxRatio = 1032
	// Snappy (strict, without the s2 extensions): after the varint length, an element is a
	// literal (a byte per byte, after its tag) or a copy of 1-byte tag plus a 1-, 2- or
	// 4-byte offset giving at most 11, 64 or 64 bytes: at most 64 bytes per 3.
	snappyMaxRatioNum, snappyMaxRatioDen = 64, 3
	// Zstandard (RFC 8878): a block regenerates at most Block_Maximum_Size, 128 KiB, and
	// costs at least 4 bytes (a 3-byte header and an RLE block's one byte); the frame
	// header takes 6 more at least. So out <= 32768 * len(src), whatever the frame header
	// says. The ratio is the format's real maximum, not a guess at what encoders reach, so
	// no valid frame is refused; it is weak (a crafted 8 KiB frame may still announce
	// 256 MiB), which is why a content size the header states must also match.
	zstdMaxRatio = 128 << 10 / 4
)

// checkExpansion refuses an announced size the payload src cannot decompress to under its
// codec's format, or that its own header contradicts, before anything is allocated.
func checkExpansion(kind pb.CompressionType, src []byte, size int) error {
	n, want := uint64(len(src)), uint64(size)
	var most uint64
	switch kind {
	case pb.CompressionType_LZ4:
		most = lz4MaxRatio * n
	case pb.CompressionType_ZLIB:
		most = deflateMaxRatio * (max(n, 2) - 2)
	case pb.CompressionType_SNAPPY:
		l, err := snappy.DecodedLen(src)
		if err != nil {
			return err
		}
		if l != size {
			return fmt.Errorf("snappy says %d bytes, metadata says %d", l, size)
		}
		most = snappyMaxRatioNum * (max(n, 1) - 1) / snappyMaxRatioDen
	case pb.CompressionType_ZSTD:
		// A frame without a content size (or a skippable one first) has only the ratio.
		// Every Pulsar client writes a single frame, so the first frame's content size is
		// the payload's.
		var h zstd.Header
		if err := h.Decode(src); err != nil && !(errors.Is(err, io.ErrUnexpectedEOF) && size == 0) {
			return fmt.Errorf("zstd frame header: %v", err)
		}
		if h.HasFCS && h.FrameContentSize != want {
			return fmt.Errorf("the zstd frame says %d bytes, metadata says %d", h.FrameContentSize, size)
		}
		most = zstdMaxRatio * n
	default:
		return nil
	}
	if want > most {
		return fmt.Errorf("%d bytes cannot expand to the announced %d (at most %d)", n, size, most)
	}
	return nil
}

// syncFlush is the empty stored block that ends a deflate stream flushed with
// SYNC_FLUSH (or FULL_FLUSH) rather than finished.
var syncFlush = []byte{0, 0, 0xff, 0xff}

// inflate fills out from the zlib stream src, which must give exactly len(out) bytes. It
// takes both forms the Pulsar clients write:
//   - a finished stream (final block, then the adler32 of the data, which must match and
//     end src), as the Go and C++ clients and Compress write it;
//   - the Java client's, whose Deflater is flushed with SYNC_FLUSH and never finished: no
//     final block, no adler32. It is taken when it stops exactly at the end of src, right
//     after a flush marker, having given len(out) bytes and no more. For an empty payload
//     the Java client writes nothing at all.
func inflate(src, out []byte) (int, error) {
	if len(src) == 0 && len(out) == 0 {
		return 0, nil
	}
	if len(src) < 2 {
		return 0, io.ErrUnexpectedEOF
	}
	// RFC 1950: deflate (CM 8) with a window of at most 32 KiB, a header check, no preset
	// dictionary (no Pulsar client uses one).
	cmf, flg := src[0], src[1]
	if cmf&0x0f != 8 || cmf>>4 > 7 || (uint16(cmf)<<8|uint16(flg))%31 != 0 || flg&0x20 != 0 {
		return 0, errors.New("not a zlib header")
	}
	in := bytes.NewReader(src[2:])
	var r io.ReadCloser
	if pooled, _ := flateReaders.Get().(io.ReadCloser); pooled != nil {
		r = pooled
		if err := r.(flate.Resetter).Reset(in, nil); err != nil {
			return 0, err
		}
	} else {
		r = flate.NewReader(in)
	}
	defer func() {
		in.Reset(nil) // the pooled reader keeps no payload alive
		flateReaders.Put(r)
	}()
	n, err := io.ReadFull(r, out)
	if err != nil {
		return n, err
	}
	var one [1]byte
	m, err := r.Read(one[:])
	switch {
	case m > 0:
		return n, errors.New("more data than the announced size")
	case err == io.EOF: // the final block: the adler32 follows, and nothing else
		var sum [4]byte
		if k, _ := in.Read(sum[:]); k != 4 || in.Len() != 0 {
			return n, errors.New("the stream's checksum is missing, cut short or followed by other bytes")
		}
		if binary.BigEndian.Uint32(sum[:]) != adler32.Checksum(out) {
			return n, zlib.ErrChecksum
		}
		return n, nil
	case err == io.ErrUnexpectedEOF && in.Len() == 0 && bytes.HasSuffix(src, syncFlush):
		return n, nil // flushed, not finished: what the Java client writes
	case err == io.ErrUnexpectedEOF:
		return n, errors.New("the stream stops short of a flush point")
	}
	return n, err
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
	flateReaders   sync.Pool // of flate readers (io.ReadCloser and flate.Resetter), made on first need
	zstdEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	// zstdDecoders[k] refuses a window above 1<<k bytes, and decodes only into the capacity
	// of the buffer it is given (exactly the announced size): a frame without a content size,
	// or lying about it, grows nothing.
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
		e.d, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(1)<<k),
			zstd.WithDecodeAllCapLimit(true))
	})
	return e.d
}
