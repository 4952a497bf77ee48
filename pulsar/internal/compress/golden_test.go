package compress

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// javaGolden is one payload the Java client's codec wrote (testdata/java, by
// testdata/javagen/gen.sh): its compressed bytes and what they must decode to.
type javaGolden struct {
	file   string
	kind   pb.CompressionType
	size   int
	sha256 string
	data   []byte
}

func readJavaGolden(tb testing.TB) []javaGolden {
	tb.Helper()
	dir := filepath.Join("testdata", "java")
	f, err := os.Open(filepath.Join(dir, "MANIFEST"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []javaGolden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 {
			tb.Fatalf("MANIFEST: %q is not \"file codec size sha256\"", line)
		}
		kind, ok := pb.CompressionType_value[fields[1]]
		size, err := strconv.Atoi(fields[2])
		if !ok || err != nil {
			tb.Fatalf("MANIFEST: %q: unknown codec or size", line)
		}
		data, err := os.ReadFile(filepath.Join(dir, fields[0]))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, javaGolden{fields[0], pb.CompressionType(kind), size, fields[3], data})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(out) == 0 {
		tb.Fatal("MANIFEST lists no payload")
	}
	return out
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestDecompressReadsEveryPayloadTheJavaCodecsWrite(t *testing.T) {
	seen := map[pb.CompressionType]int{}
	for _, g := range readJavaGolden(t) {
		// The limit is the announced size itself: a payload exactly at the limit is accepted.
		out, err := Decompress(g.kind, g.data, g.size, g.size)
		if err != nil {
			t.Errorf("%s: %v", g.file, err)
			continue
		}
		if len(out) != g.size || sha256Hex(out) != g.sha256 {
			t.Errorf("%s: %d bytes with sha256 %s, want %d bytes with %s", g.file, len(out), sha256Hex(out), g.size, g.sha256)
		}
		seen[g.kind]++
	}
	for _, k := range kinds[1:] {
		if seen[k] == 0 {
			t.Errorf("no golden payload of %s decoded", k)
		}
	}
}

// A Java payload announced one byte short or one byte long is refused: the decoder
// neither truncates the output nor pads it.
func TestDecompressRefusesAJavaPayloadUnderTheWrongSize(t *testing.T) {
	for _, g := range readJavaGolden(t) {
		for _, size := range []int{g.size - 1, g.size + 1} {
			if size < 0 {
				continue
			}
			if _, err := Decompress(g.kind, g.data, size, 1<<20); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s announced as %d bytes (it has %d): %v", g.file, size, g.size, err)
			}
		}
	}
}

// A Java payload cut short anywhere is refused (or, when the cut loses nothing the decoder
// needs, still gives the exact bytes).
func TestDecompressRefusesATruncatedJavaPayload(t *testing.T) {
	for _, g := range readJavaGolden(t) {
		if g.size == 0 || len(g.data) > 4096 {
			continue
		}
		for cut := 0; cut < len(g.data); cut++ {
			out, err := Decompress(g.kind, g.data[:cut], g.size, 1<<20)
			if err == nil && sha256Hex(out) != g.sha256 {
				t.Errorf("%s cut to %d bytes: accepted with other bytes", g.file, cut)
			}
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s cut to %d bytes: %v is not ErrCorrupt", g.file, cut, err)
			}
		}
	}
}

// The Java client's ZLIB codec flushes its Deflater with SYNC_FLUSH and never finishes
// the stream: no final block, no adler32. Its payloads end with the flush marker and
// must decode all the same; the bridge used to refuse every one of them.
func TestDecompressAcceptsTheJavaClientsUnfinishedZlibStream(t *testing.T) {
	for _, g := range readJavaGolden(t) {
		if g.kind != pb.CompressionType_ZLIB || g.size == 0 {
			continue
		}
		if !bytes.HasSuffix(g.data, []byte{0, 0, 0xff, 0xff}) {
			t.Fatalf("%s does not end with a sync-flush marker: not the stream this test is about", g.file)
		}
		out, err := Decompress(g.kind, g.data, g.size, g.size)
		if err != nil || sha256Hex(out) != g.sha256 {
			t.Errorf("%s: %v", g.file, err)
		}
	}
}

// A finished zlib stream (what Compress and the Go client write) still has its adler32
// checked: accepting the Java client's unfinished stream does not mean accepting a
// finished one whose checksum is wrong or cut off.
func TestDecompressChecksTheChecksumOfAFinishedZlibStream(t *testing.T) {
	in := bytes.Repeat([]byte("TASK_RUNNING "), 100)
	c, err := Compress(pb.CompressionType_ZLIB, nil, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(pb.CompressionType_ZLIB, c, len(in), len(in)); err != nil {
		t.Fatalf("the intact stream: %v", err)
	}
	wrong := bytes.Clone(c)
	wrong[len(wrong)-1] ^= 1
	for name, src := range map[string][]byte{
		"a wrong checksum":          wrong,
		"no checksum":               c[:len(c)-4],
		"half a checksum":           c[:len(c)-2],
		"a byte after the checksum": append(bytes.Clone(c), 0),
	} {
		if _, err := Decompress(pb.CompressionType_ZLIB, src, len(in), len(in)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s accepted: %v", name, err)
		}
	}
}

// The Java client's unfinished stream is taken only whole: ending with its flush marker,
// with nothing after it.
func TestDecompressRefusesAJavaZlibStreamCutInItsFlushMarkerOrWithBytesAfterIt(t *testing.T) {
	for _, g := range readJavaGolden(t) {
		if g.kind != pb.CompressionType_ZLIB || g.size == 0 {
			continue
		}
		for cut := 1; cut <= 4; cut++ {
			if _, err := Decompress(g.kind, g.data[:len(g.data)-cut], g.size, g.size); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s without its last %d bytes: %v", g.file, cut, err)
			}
		}
		for _, tail := range [][]byte{{0}, {1}, {0, 0, 0, 0}, {0x03, 0x00}} {
			if _, err := Decompress(g.kind, append(bytes.Clone(g.data), tail...), g.size, g.size); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s followed by % x: %v", g.file, tail, err)
			}
		}
	}
}
