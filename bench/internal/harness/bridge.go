package harness

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bridge is a bridge binary running for a benchmark.
type Bridge struct {
	Cmd     *exec.Cmd
	DataURL string
	OpsURL  string
}

// Pprof turns the bridge's /debug/pprof/ on (listen.pprof) for the bridges started
// after it is set.
var Pprof bool

// StartBridge runs bin with cfg (YAML without the listen section, which gets free
// loopback ports) and waits until /readyz answers 200. env (KEY=VALUE) is added to the
// process's environment.
func StartBridge(bin, cfg string, env ...string) (*Bridge, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-bridge")
	if err != nil {
		return nil, err
	}
	full := fmt.Sprintf("listen:\n  data: 127.0.0.1:%d\n  ops: 127.0.0.1:%d\n  pprof: %t\n%s", ports[0], ports[1], Pprof, cfg)
	path := filepath.Join(dir, "bridge.yaml")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "-config", path, "-log-level", "warn")
	cmd.Stderr = os.Stderr
	// It dies with the benchmark, whatever the way it ends (log.Fatal runs no deferred
	// Stop; a benchmark keeping many bridges would leave them running).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w (run make build first)", bin, err)
	}
	b := &Bridge{Cmd: cmd, DataURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), OpsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(b.OpsURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return b, nil
			}
		}
	}
	b.Stop()
	return nil, errors.New("the bridge was not ready within 30s")
}

// Stop sends SIGTERM and waits for the exit.
func (b *Bridge) Stop() {
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()
}

// CPU is the bridge process's CPU time so far (ProcCPU).
func (b *Bridge) CPU() time.Duration { return ProcCPU(b.Cmd.Process.Pid) }

// RSS is the bridge process's resident set size.
func (b *Bridge) RSS() int64 { return ProcRSS(b.Cmd.Process.Pid) }

// ProcCPU is a process's CPU time so far, user and system, of all its threads, those
// that have exited included, in nanoseconds: clock_gettime(2) on the process's CPU-time
// clock (clock_getcpuclockid(3): the scheduler's own runtime sum of the thread group,
// which Linux lets any process read). It is exact where the alternatives are not:
// /proc/<pid>/stat's utime+stime (StatCPU) count the same time in 10 ms ticks (0.1 µs a
// record over 100 000 records, 2 % of an untraced one), and the threads' own
// /proc/<pid>/task/*/schedstat, in nanoseconds too, lose the threads that have exited.
// Where the clock cannot be read (not Linux, the process gone) it falls back to StatCPU.
func ProcCPU(pid int) time.Duration {
	var ts unix.Timespec
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's posix-timers.h.
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return StatCPU(pid)
	}
	return time.Duration(ts.Nano())
}

// StatCPU is a process's user+system time from /proc/<pid>/stat, in 10 ms ticks.
func StatCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// ProcRSS is a process's resident set size from /proc/<pid>/status.
func ProcRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// FreePorts returns n loopback TCP ports free at the time of the call.
func FreePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// FetchProfile writes the bridge's pprof profile kind (profile: CPU; allocs: the
// allocations made meanwhile) over the next seconds to path, or (seconds 0) as it is now
// (heap: what is in use); the bridge must have been started with Pprof set.
func FetchProfile(opsURL, kind string, seconds int, path string) {
	u := fmt.Sprintf("%s/debug/pprof/%s", opsURL, kind)
	if seconds > 0 {
		u += fmt.Sprintf("?seconds=%d", seconds)
	}
	resp, err := http.Get(u)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		log.Fatalf("%s profile: %d %v %s", kind, resp.StatusCode, err, b)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
