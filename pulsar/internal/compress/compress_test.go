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
			out, err := Decompress(k, c[len(prefix):], len(in))
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
		if _, err := Decompress(k, c, 999); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: wrong size accepted: %v", k, err)
		}
		if _, err := Decompress(k, []byte("garbage!garbage!"), 1000); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: garbage accepted: %v", k, err)
		}
		if _, err := Decompress(k, c, MaxUncompressedSize+1); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: absurd size accepted: %v", k, err)
		}
	}
}
