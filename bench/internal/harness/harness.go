// Package harness holds what the side-by-side benchmarks share: process CPU time and a
// quiet logger for the official client.
package harness

import (
	"io"
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
