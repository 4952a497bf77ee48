package compress

import (
	"runtime"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestATinyPayloadCannotMakeDecompressAllocateItsAnnouncedSize: the announced size is
// checked against the limit only, and the buffer of that size is made before the codec
// looks at the payload. A chunked message's limit is 256 MiB: two bytes of chunks that
// announce it cost a 256 MiB allocation each (outside any budget) before they fail.
// Every codec bounds what a payload can expand to (LZ4 about 255 times, deflate about
// 1032, Snappy's and ZSTD's headers state it), so the size can be refused first.
func TestATinyPayloadCannotMakeDecompressAllocateItsAnnouncedSize(t *testing.T) {
	const size = 256 << 20
	for _, kind := range []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_SNAPPY} {
		src := []byte{0x78, 0x9c} // two bytes, whatever the codec
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decompress(kind, src, size, size)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: two bytes decompressed to %d", kind, size)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got >= size/2 {
			t.Errorf("%s: %d bytes allocated to refuse a 2-byte payload announcing %d", kind, got, size)
		}
	}
}
