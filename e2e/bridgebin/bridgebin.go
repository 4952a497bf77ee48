// Package bridgebin is the bridge binary the end-to-end tests run: the one BRIDGE_BIN
// names (make e2e builds it), or one built once per test binary.
package bridgebin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
)

// Path is the binary's path: $BRIDGE_BIN, or the first call builds ./cmd/bridge of the
// repository at root (relative to the test's directory, as ".." from e2e) into a
// temporary directory. A failed build fails the test, and every later one.
func Path(t testing.TB, root string) string {
	t.Helper()
	once.Do(func() {
		if p := os.Getenv("BRIDGE_BIN"); p != "" {
			path = p
			return
		}
		dir, mkErr := os.MkdirTemp("", "bridge-bin")
		if mkErr != nil {
			err = mkErr
			return
		}
		path = filepath.Join(dir, "bridge")
		cmd := exec.Command("go", "build", "-o", path, "./cmd/bridge")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, buildErr := cmd.CombinedOutput(); buildErr != nil {
			err = fmt.Errorf("go build: %v\n%s", buildErr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}
