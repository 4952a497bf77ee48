package chaos

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recordingTB stands in for a test that fails: Fatal ends the calling goroutine as it does in
// a test, and the cleanups are kept to be run by the caller.
type recordingTB struct {
	testing.TB // the real test: TempDir, Logf, Helper
	mu         sync.Mutex
	failures   []string
	cleanups   []func()
	dirs       []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Error(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recordingTB) Fatal(args ...any)                 { r.Error(args...); runtime.Goexit() }
func (r *recordingTB) FailNow()                          { r.Error("FailNow"); runtime.Goexit() }
func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}
func (r *recordingTB) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}
func (r *recordingTB) TempDir() string {
	d := r.TB.TempDir()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirs = append(r.dirs, d)
	return d
}

// runCleanups runs the kept cleanups, last first, as the testing package does.
func (r *recordingTB) runCleanups() {
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// processesUsing lists the processes whose command line names a path under dir.
func processesUsing(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir+string(filepath.Separator))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestFailedBridgeStartLeavesNoProcess: a chaos test whose bridge does not become ready (its
// broker unreachable, as behind a dead Pulsar proxy) fails, and once its cleanups have run
// the bridge process is gone. It used to stay: the cleanup that stops it was registered only
// after a successful start, and leftover bridges piled up behind failed tests.
func TestFailedBridgeStartLeavesNoProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dead := freePort(t) // nothing listens there: the bridge's broker is unreachable, /readyz stays 503
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		startBridgeReady(rec, fmt.Sprintf("pulsar:\n  url: pulsar://127.0.0.1:%d\n  operationTimeout: 2s\n", dead), 5*time.Second)
	}()
	// The check below must be able to see the bridge: find it while it is starting.
	var dir string
	seen := waitFor(t.Context(), time.Minute, func() bool {
		rec.mu.Lock()
		if len(rec.dirs) > 0 {
			dir = rec.dirs[0]
		}
		rec.mu.Unlock()
		return dir != "" && len(processesUsing(dir)) > 0
	})
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("startBridgeReady did not return within 2 minutes")
	}
	if !seen {
		t.Fatalf("no bridge process with its configuration under %q seen while it started: the check cannot see one", dir)
	}
	if !rec.Failed() {
		t.Fatal("the bridge became ready with its broker unreachable: the test cannot show what it is for")
	}
	t.Logf("the failed start said: %s", strings.Join(rec.failures, "; "))
	rec.runCleanups()
	var left []int
	if !waitFor(t.Context(), 30*time.Second, func() bool { left = processesUsing(dir); return len(left) == 0 }) {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL) // not to leave it behind this test too
		}
		t.Fatalf("bridge process(es) %v still running after the failed test's cleanups", left)
	}
}
