package chaos

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procState is the state letter of a process (R, S, T for stopped, ...), or "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestBrokenClusterIsRepairedAndBlamed: a fault test that fails between its fault and its
// repair (broker 2 frozen with SIGSTOP, then a Fatal before the SIGCONT, as
// TestBrokerFrozenThenThawed could) must not leave the cluster broken for the tests after it:
// once its cleanups have run broker 2 runs again, and the test has failed naming what it
// left broken.
func TestBrokenClusterIsRepairedAndBlamed(t *testing.T) {
	c := useCluster(t)
	pid := c.pid(t, "broker2")
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		useCluster(rec)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			rec.Fatalf("SIGSTOP: %v", err)
		}
		// The stop takes effect once every thread of the JVM has taken the signal.
		if !waitFor(t.Context(), time.Minute, func() bool { return procState(pid) == "T" }) {
			rec.Fatalf("broker 2 (pid %d) not stopped a minute after SIGSTOP (state %q)", pid, procState(pid))
		}
		rec.Fatalf("a failure between the fault and its repair")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the failing test did not end within 5 minutes")
	}
	if st := procState(pid); st != "T" {
		t.Fatalf("broker 2 (pid %d) is in state %q after the SIGSTOP, not stopped: the test cannot show what it is for", pid, st)
	}
	rec.runCleanups()
	now := c.pid(t, "broker2") // the same process, continued, or a new one
	if st := procState(now); st == "T" || st == "" {
		t.Errorf("broker 2 (pid %d) is in state %q after the failed test's cleanups: left broken for the next tests", now, st)
	}
	all := strings.Join(rec.failures, "\n")
	if !strings.Contains(all, "left the cluster broken; repaired: broker2") {
		t.Errorf("the failed test was not blamed for the frozen broker; its failures:\n%s", all)
	}
	t.Logf("the failed test's failures:\n%s", all)
}
