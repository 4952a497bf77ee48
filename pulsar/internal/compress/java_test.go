package compress

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

// javaDecoder compiles JavaCodecs.java against the distribution (once per source: the
// classes are kept under the distribution cache) and returns a function that runs its
// decode mode on request lines, giving each file's answer. It skips the test when java,
// javac or the distribution is missing.
func javaDecoder(t *testing.T) func(req string) map[string]string {
	t.Helper()
	cache := os.Getenv("PULSAR_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("skipping: no home directory for the distribution cache: %v", err)
		}
		cache = filepath.Join(home, ".cache", "recordio-bridge")
	}
	version := os.Getenv("PULSAR_VERSION")
	if version == "" {
		version = "4.0.8"
	}
	dist := filepath.Join(cache, "apache-pulsar-"+version)
	jars, _ := filepath.Glob(filepath.Join(dist, "lib", "org.apache.pulsar-pulsar-common-*.jar"))
	java, errJava := exec.LookPath("java")
	javac, errJavac := exec.LookPath("javac")
	if len(jars) == 0 || errJava != nil || errJavac != nil {
		t.Skipf("skipping: the Java codecs need java and javac on PATH and an Apache Pulsar distribution at %s "+
			"(e2e/pulsar/pulsar.sh fetch unpacks it there); java: %v, javac: %v, pulsar-common jars: %d",
			dist, errJava, errJavac, len(jars))
	}
	source, err := os.ReadFile(filepath.Join("testdata", "javagen", "JavaCodecs.java"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(source, dist...))
	classes := filepath.Join(cache, "javacodecs", hex.EncodeToString(sum[:8]))
	classpath := classes + string(os.PathListSeparator) + filepath.Join(dist, "lib", "*")
	if _, err := os.Stat(filepath.Join(classes, "JavaCodecs.class")); err != nil {
		if err := os.MkdirAll(filepath.Dir(classes), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(classes), "build-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command(javac, "-nowarn", "-d", tmp, "-cp", filepath.Join(dist, "lib", "*"),
			filepath.Join("testdata", "javagen", "JavaCodecs.java"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
		// Another test process may have put the same classes there first: either copy does.
		if err := os.Rename(tmp, classes); err != nil && !errors.Is(err, os.ErrExist) {
			if _, statErr := os.Stat(filepath.Join(classes, "JavaCodecs.class")); statErr != nil {
				t.Fatal(err)
			}
		}
	}
	return func(req string) map[string]string {
		cmd := exec.Command(java, "-cp", classpath, "JavaCodecs", "decode")
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
