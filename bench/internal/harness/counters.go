package harness

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Counters are a bridge process's cumulative costs that explain its CPU per record:
// the system calls it made and the heap objects it allocated.
type Counters struct {
	Syscalls int64 // read and write system calls (/proc/<pid>/io syscr + syscw)
	Mallocs  int64 // heap objects allocated (go_memstats_mallocs_total); -1 if unknown
}

// Sub is c minus an earlier reading.
func (c Counters) Sub(before Counters) Counters {
	d := Counters{Syscalls: c.Syscalls - before.Syscalls, Mallocs: -1}
	if c.Mallocs >= 0 && before.Mallocs >= 0 {
		d.Mallocs = c.Mallocs - before.Mallocs
	}
	return d
}

// Counters reads the bridge's counters now: the system calls from /proc, the
// allocations from its /metrics (the Go collector's go_memstats_mallocs_total).
func (b *Bridge) Counters() Counters {
	return Counters{Syscalls: ProcSyscalls(b.Cmd.Process.Pid), Mallocs: metric(b.OpsURL+"/metrics", "go_memstats_mallocs_total")}
}

// ProcSyscalls is how many read and write system calls a process has made (syscr and
// syscw of /proc/<pid>/io: reads, writes, and their vectored and socket forms).
func ProcSyscalls(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

// metric reads one unlabelled sample from a Prometheus text endpoint; -1 if absent.
func metric(url, name string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return int64(f)
		}
	}
	return -1
}
