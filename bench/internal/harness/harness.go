// Package harness holds what the side-by-side benchmarks share: process CPU time and a
// quiet logger for the official client.
package harness

import (
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

// CPUTime is this process's user+system CPU time so far, in nanoseconds
// (CLOCK_PROCESS_CPUTIME_ID; getrusage's figure where that fails).
func CPUTime() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) == nil {
		return time.Duration(ts.Nano())
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// QuietLogger keeps the official client's logging out of the tables.
func QuietLogger() plog.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return plog.NewLoggerWithLogrus(l)
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, as /proc/loadavg
// gives it ("?" where it cannot be read): the figures of a shared machine mean little
// without it.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
