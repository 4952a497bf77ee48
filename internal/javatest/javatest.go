// Package javatest compiles and runs small Java programs against the Apache Pulsar
// distribution the test scripts fetch, for tests that take Pulsar's reference Java
// client as their oracle.
package javatest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
)

// ErrUnavailable is wrapped by Compile when there is no JDK or no distribution to
// compile against: tests skip then, saying why.
var ErrUnavailable = errors.New("the Java toolchain or the Pulsar distribution is not available")

// DistDir is the distribution e2e/pulsar/pulsar.sh unpacks: PULSAR_CACHE_DIR (default
// ~/.cache/recordio-bridge) / apache-pulsar-PULSAR_VERSION (default 4.0.8).
func DistDir() string {
	return filepath.Join(cacheDir(), "apache-pulsar-"+envOr("PULSAR_VERSION", "4.0.8"))
}

func cacheDir() string {
	if c := os.Getenv("PULSAR_CACHE_DIR"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "recordio-bridge")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// FindJDK returns javac and java of one JDK 17 or later: JAVA_HOME's, PATH's, or one
// under /usr/lib/jvm; empty strings when there is none.
func FindJDK() (javac, java string) {
	var homes []string
	if h := os.Getenv("JAVA_HOME"); h != "" {
		homes = append(homes, h)
	}
	if p, err := exec.LookPath("javac"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			homes = append(homes, filepath.Dir(filepath.Dir(r)))
		}
	}
	more, _ := filepath.Glob("/usr/lib/jvm/*")
	homes = append(homes, more...)
	for _, h := range homes {
		c, j := filepath.Join(h, "bin", "javac"), filepath.Join(h, "bin", "java")
		if isExec(c) && isExec(j) {
			return c, j
		}
	}
	return "", ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Program is a compiled program: the java binary to run it with and its classpath
// (its classes, then the distribution's lib/*).
type Program struct {
	Java, Classpath string
}

// Command runs mainClass of the program with args.
func (p Program) Command(mainClass string, args ...string) *exec.Cmd {
	return exec.Command(p.Java, append([]string{"-cp", p.Classpath, mainClass}, args...)...)
}

var (
	mu       sync.Mutex
	compiled = map[string]result{}
)

type result struct {
	p   Program
	err error
}

// Compile compiles every .java file in dir against the distribution's jars, once per
// process, and keeps the classes in the cache directory under a name made of dir's
// base name and a hash of the sources and the distribution, so a changed source is
// compiled again and an unchanged one never is. Concurrent test processes may compile
// the same sources: the first to finish wins, the other's copy is dropped.
func Compile(dir string) (Program, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Program{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if r, ok := compiled[abs]; ok {
		return r.p, r.err
	}
	p, err := compile(abs)
	compiled[abs] = result{p, err}
	return p, err
}

func compile(dir string) (Program, error) {
	dist := DistDir()
	if st, err := os.Stat(filepath.Join(dist, "lib")); err != nil || !st.IsDir() {
		return Program{}, fmt.Errorf("%w: no Pulsar distribution at %s (run e2e/pulsar/pulsar.sh fetch)", ErrUnavailable, dist)
	}
	javac, java := FindJDK()
	if javac == "" {
		return Program{}, fmt.Errorf("%w: no JDK (javac and java) in JAVA_HOME, on PATH or under /usr/lib/jvm "+
			"(apt-get install openjdk-17-jdk-headless)", ErrUnavailable)
	}
	src, err := filepath.Glob(filepath.Join(dir, "*.java"))
	if err != nil || len(src) == 0 {
		return Program{}, fmt.Errorf("javatest: no Java sources in %s", dir)
	}
	sort.Strings(src)
	h := sha256.New()
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			return Program{}, err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "dist %s\n", dist)
	classes := filepath.Join(cacheDir(), "java-"+filepath.Base(dir)+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	libs := filepath.Join(dist, "lib", "*")
	p := Program{Java: java, Classpath: classes + string(os.PathListSeparator) + libs}
	if isDir(classes) {
		return p, nil
	}
	tmp, err := os.MkdirTemp(cacheDir(), "java-build-")
	if err != nil {
		return Program{}, err
	}
	defer os.RemoveAll(tmp)
	args := append([]string{"-d", tmp, "-cp", libs, "--release", "17", "-nowarn"}, src...)
	if out, err := exec.Command(javac, args...).CombinedOutput(); err != nil {
		return Program{}, fmt.Errorf("javatest: javac %s: %v\n%s", dir, err, out)
	}
	if err := os.Rename(tmp, classes); err != nil && !isDir(classes) {
		return Program{}, err
	}
	return p, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
