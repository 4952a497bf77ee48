package compress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/internal/javatest"
)

// TestTheJavaCodecsDecodeWhatCompressWrites hands what Compress writes, for every codec,
// to the Java client's own codecs (testdata/javagen/JavaCodecs.java, run against the Apache
// Pulsar distribution the e2e tests use) and checks they decode it to the very bytes. The
// inputs are those of the golden payloads (decoded here first) and a few larger ones.
func TestTheJavaCodecsDecodeWhatCompressWrites(t *testing.T) {
	decode := javaDecoder(t)
	inputs := map[string][]byte{}
	for _, g := range readJavaGolden(t) {
		out, err := Decompress(g.kind, g.data, g.size, g.size)
		if err != nil {
			t.Fatalf("%s: %v", g.file, err)
		}
		inputs[strings.TrimSuffix(g.file, filepath.Ext(g.file))] = out
	}
	rng := rand.New(rand.NewPCG(3, 4))
	random := make([]byte, 100_000)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	inputs["random-100k"] = random
	inputs["repeated-300k"] = bytes.Repeat([]byte("TASK_RUNNING agent-7 "), 300_000/21)

	dir := t.TempDir()
	var req strings.Builder
	want := map[string]string{}
	for name, in := range inputs {
		for _, k := range kinds[1:] {
			c, err := Compress(k, nil, in)
			if err != nil {
				t.Fatalf("%s %s: %v", k, name, err)
			}
			path := filepath.Join(dir, name+"."+strings.ToLower(k.String()))
			if err := os.WriteFile(path, c, 0o644); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&req, "%s %d %s\n", k, len(in), path)
			want[path] = sha256Hex(in)
		}
	}
	got := decode(req.String())
	for path, sum := range want {
		switch res, ok := got[path]; {
		case !ok:
			t.Errorf("%s: the Java program said nothing of it", filepath.Base(path))
		case res != "ok "+sum:
			t.Errorf("%s: the Java codec says %q, want ok %s", filepath.Base(path), res, sum)
		}
	}
}

// javaDecoder compiles JavaCodecs.java against the distribution (internal/javatest keeps
// the classes of each version of the source) and returns a function that runs its
// decode mode on request lines, giving each file's answer. It skips the test when java,
// javac or the distribution is missing.
func javaDecoder(t *testing.T) func(req string) map[string]string {
	t.Helper()
	prog, err := javatest.Compile(filepath.Join("testdata", "javagen"))
	if errors.Is(err, javatest.ErrUnavailable) {
		t.Skip("skipping the Java codecs: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return func(req string) map[string]string {
		cmd := prog.Command("JavaCodecs", "decode")
		cmd.Stdin = strings.NewReader(req)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("java JavaCodecs decode: %v\n%s", err, stderr.Bytes())
		}
		got := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			path, res, ok := strings.Cut(sc.Text(), " ")
			if ok {
				got[path] = res
			}
		}
		return got
	}
}
