package harness

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// MemStats is the part of the bridge's runtime.MemStats that says where its resident
// memory goes, read from /debug/pprof/heap?debug=1 (the bridge must run with Pprof).
type MemStats struct {
	HeapInuse, HeapIdle, HeapReleased, StackInuse, Sys int64
	Goroutines                                         int64
}

// FetchMemStats reads the bridge's MemStats and goroutine count.
func FetchMemStats(opsURL string) (MemStats, error) {
	var m MemStats
	resp, err := http.Get(opsURL + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	fields := map[string]*int64{"HeapInuse": &m.HeapInuse, "HeapIdle": &m.HeapIdle, "HeapReleased": &m.HeapReleased,
		"StackInuse": &m.StackInuse, "Sys": &m.Sys}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "# HeapInuse = 1234"
		name, val, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if name == "Stack" { // "# Stack = StackInuse / StackSys"
			name, val = "StackInuse", strings.Split(val, " / ")[0]
		}
		if p := fields[name]; ok && p != nil {
			*p, _ = strconv.ParseInt(val, 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	g, err := http.Get(opsURL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return m, err
	}
	defer g.Body.Close()
	// "goroutine profile: total 1234"
	if line, err := bufio.NewReader(g.Body).ReadString('\n'); err == nil {
		m.Goroutines, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total ")), 10, 64)
	}
	return m, nil
}

// PerStream says how each figure grew between before and after, in KiB per stream.
func (after MemStats) PerStream(before MemStats, n int) string {
	kib := func(a, b int64) float64 { return float64(a-b) / 1024 / float64(n) }
	return fmt.Sprintf("heap in use %.1f KiB, goroutine stacks %.1f KiB (%.2f goroutines), heap idle not released %.1f KiB per stream",
		kib(after.HeapInuse, before.HeapInuse), kib(after.StackInuse, before.StackInuse),
		float64(after.Goroutines-before.Goroutines)/float64(n),
		kib(after.HeapIdle-after.HeapReleased, before.HeapIdle-before.HeapReleased))
}
