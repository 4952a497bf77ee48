package compress

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestDecompressRefusesASizeThePayloadCannotExpandToBeforeAllocatingIt: a chunked
// message's limit is 256 MiB, so a few bytes announcing it would cost a 256 MiB buffer
// (outside any budget, on the connection's reader) before the codec fails. Each codec's
// format bounds what a payload of its length can expand to, and Snappy's and ZSTD's
// headers state the size: the two bytes of no codec, a header of the codec's own
// announcing the size, and a ZSTD header stating another size within the ratio bound
// are all refused without allocating the announced size.
func TestDecompressRefusesASizeThePayloadCannotExpandToBeforeAllocatingIt(t *testing.T) {
	const limit = 256 << 20
	zstdHeader := func(size uint64) []byte { // single segment, 8-byte content size
		return binary.LittleEndian.AppendUint64([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, size)
	}
	cases := []struct {
		kind pb.CompressionType
		src  []byte
		size int
	}{
		{pb.CompressionType_LZ4, []byte{0x78, 0x9c}, limit},
		{pb.CompressionType_LZ4, []byte{0xf0, 0xff}, limit},
		{pb.CompressionType_ZLIB, []byte{0x78, 0x9c}, limit},
		{pb.CompressionType_ZLIB, []byte{0x78, 0x9c, 0x00}, limit},
		{pb.CompressionType_SNAPPY, []byte{0x78, 0x9c}, limit},
		{pb.CompressionType_SNAPPY, binary.AppendUvarint(nil, limit), limit},
		{pb.CompressionType_ZSTD, []byte{0x78, 0x9c}, limit},
		{pb.CompressionType_ZSTD, zstdHeader(limit), limit},
		{pb.CompressionType_ZSTD, zstdHeader(1), 256 << 10}, // 13 bytes may reach 416 KiB
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decompress(c.kind, c.src, c.size, limit)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: % x decompressed to %d bytes", c.kind, c.src, c.size)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got >= uint64(c.size)/2 {
			t.Errorf("%s: %d bytes allocated to refuse % x announcing %d", c.kind, got, c.src, c.size)
		}
	}
}
