package compress

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

var kinds = []pb.CompressionType{pb.CompressionType_NONE, pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("pulsar "), 10_000)}
	random := make([]byte, 100_000)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	inputs = append(inputs, random)
	for _, k := range kinds {
		for _, in := range inputs {
			prefix := []byte("keep")
			c, err := Compress(k, prefix, in)
			if err != nil {
				t.Fatalf("%s compress %d bytes: %v", k, len(in), err)
			}
			if !bytes.HasPrefix(c, prefix) {
				t.Fatalf("%s: dst prefix lost", k)
			}
			out, err := Decompress(k, c[len(prefix):], len(in), len(in))
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("%s round trip of %d bytes: %v", k, len(in), err)
			}
		}
	}
}

func TestDecompressRejectsWrongSizeAndGarbage(t *testing.T) {
	in := bytes.Repeat([]byte("x"), 1000)
	for _, k := range kinds[1:] {
		c, _ := Compress(k, nil, in)
		if _, err := Decompress(k, c, 999, 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: wrong size accepted: %v", k, err)
		}
		if _, err := Decompress(k, []byte("garbage!garbage!"), 1000, 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: garbage accepted: %v", k, err)
		}
		if _, err := Decompress(k, c, 1000, 999); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: a size above the limit accepted: %v", k, err)
		}
	}
}

// FuzzDecompress: whatever the bytes and the announced size, decompression neither
// panics nor returns other than exactly the announced size within the limit; and
// what Compress writes comes back.
func FuzzDecompress(f *testing.F) {
	for _, k := range kinds {
		c, _ := Compress(k, nil, []byte("pulsar pulsar pulsar"))
		f.Add(uint8(k), c, uint32(20), []byte("pulsar pulsar pulsar"))
	}
	f.Fuzz(func(t *testing.T, kind uint8, src []byte, size uint32, plain []byte) {
		const limit = 1 << 20
		k := pb.CompressionType(kind % 5)
		out, err := Decompress(k, src, int(size), limit)
		if err == nil && k != pb.CompressionType_NONE && (len(out) != int(size) || len(out) > limit) {
			t.Fatalf("%s: %d bytes, announced %d", k, len(out), size)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: an error that is not ErrCorrupt: %v", k, err)
		}
		if len(plain) > limit {
			return
		}
		c, err := Compress(k, nil, plain)
		if err != nil {
			t.Fatalf("%s: compressing %d bytes: %v", k, len(plain), err)
		}
		back, err := Decompress(k, c, len(plain), limit)
		if err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("%s: round trip of %d bytes: %v", k, len(plain), err)
		}
	})
}
