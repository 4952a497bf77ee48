package compress

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"runtime/metrics"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"

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

// Snappy is decoded as Snappy: the s2 "repeat the last offset" copy (offset 0), which
// klauspost's lenient decoder takes and no Snappy writer produces, is refused.
func TestDecompressRefusesSnappyWithAnS2RepeatOffset(t *testing.T) {
	// 12 bytes: the literal "abcd", a copy of 4 at offset 4, a copy of 4 at offset 0.
	src := []byte{12, 3 << 2, 'a', 'b', 'c', 'd', 1, 4, 1, 0}
	if out, err := snappy.Decode(nil, src); err != nil || string(out) != "abcdabcdabcd" {
		t.Fatalf("not the s2 payload this test is about: %q, %v", out, err)
	}
	if out, err := Decompress(pb.CompressionType_SNAPPY, src, 12, 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("accepted as %q: %v", out, err)
	}
}

// A payload that decodes to far more than its metadata announces is refused without
// growing a buffer for what it would decode to: whatever the limit, a call allocates the
// announced size and a decoder's bounded working state. The ZSTD frame here has no
// content size, so only the output buffer's capacity can stop it.
func TestDecompressAllocatesOnlyTheAnnouncedSizeForAPayloadThatDecodesToMore(t *testing.T) {
	const limit, announced = 64 << 20, 1000
	big := make([]byte, 8<<20)
	var frame bytes.Buffer
	w, err := zstd.NewWriter(&frame, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if h := (zstd.Header{}); h.Decode(frame.Bytes()) != nil || h.HasFCS {
		t.Fatalf("the frame announces its size (%v): not the payload this test is about", h.Decode(frame.Bytes()))
	}
	payloads := map[pb.CompressionType][]byte{pb.CompressionType_ZSTD: frame.Bytes()}
	for _, k := range []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_SNAPPY} {
		payloads[k], _ = Compress(k, nil, big)
	}
	for k, src := range payloads {
		Decompress(k, src, announced, limit) // warm the decoders: their state is made once
		allocated := uint64(math.MaxUint64)
		for try := 0; try < 3; try++ {
			before := allocatedBytes()
			_, err = Decompress(k, src, announced, limit)
			allocated = min(allocated, allocatedBytes()-before)
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: 8 MiB announced as %d bytes: %v", k, announced, err)
		}
		if allocated > announced+decoderState {
			t.Errorf("%s: %d bytes allocated to refuse 8 MiB announced as %d bytes", k, allocated, announced)
		}
	}
}

// FuzzDecompress: whatever the codec, the bytes and the announced size, decompression
// neither panics, nor allocates more than the announced size (when within the limit) and
// a decoder's bounded working state, nor returns other than exactly the announced size;
// Snappy's strict decoder agrees with the lenient one wherever it accepts; and what
// Compress writes comes back. The seeds include every payload the Java codecs wrote
// (testdata/java).
func FuzzDecompress(f *testing.F) {
	for _, k := range kinds {
		c, _ := Compress(k, nil, []byte("pulsar pulsar pulsar"))
		f.Add(uint8(k), c, uint32(20), []byte("pulsar pulsar pulsar"))
	}
	for _, g := range readJavaGolden(f) {
		f.Add(uint8(g.kind), g.data, uint32(g.size), []byte(nil))
	}
	f.Fuzz(func(t *testing.T, kind uint8, src []byte, size uint32, plain []byte) {
		const limit = 1 << 20
		k := pb.CompressionType(kind % 5)
		bound := uint64(decoderState)
		if size <= limit {
			bound += uint64(size)
		}
		var out []byte
		var err error
		// The heap counter is the whole process's: the fuzzing worker's own goroutines
		// allocate now and then, so a call over the bound is measured twice more and the
		// least of the three counts.
		allocated := uint64(math.MaxUint64)
		for try := 0; try < 3 && allocated > bound; try++ {
			before := allocatedBytes()
			out, err = Decompress(k, src, int(size), limit)
			allocated = min(allocated, allocatedBytes()-before)
		}
		if k != pb.CompressionType_NONE && allocated > bound {
			t.Fatalf("%s: %d bytes allocated for %d announced (at most %d)", k, allocated, size, bound)
		}
		if err == nil && k != pb.CompressionType_NONE && (len(out) != int(size) || len(out) > limit) {
			t.Fatalf("%s: %d bytes, announced %d", k, len(out), size)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: an error that is not ErrCorrupt: %v", k, err)
		}
		if err == nil && k == pb.CompressionType_SNAPPY {
			if lenient, err := snappy.Decode(nil, src); err != nil || !bytes.Equal(lenient, out) {
				t.Fatalf("snappy: the strict decoder accepted what the lenient one decodes otherwise (%v)", err)
			}
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

// decoderState bounds what one Decompress call may allocate besides its output: a zlib
// reader's window and tables when the pool has none, a zstd block's working buffers, and
// the allocator's accounting, which counts small objects a whole span at a time.
const decoderState = 512 << 10

// allocatedBytes: the heap bytes this process has allocated so far.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
