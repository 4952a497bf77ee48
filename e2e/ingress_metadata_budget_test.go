package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestHugeHeaderPropertiesStayInsideTheBudget: a route copies a request header into every
// message's properties, and a client sends a 768 KiB header with a stream of tiny
// records. Each message then costs the bridge its properties, not its 20-byte payload:
// memory.budget (16 MiB here) must count them, or 4 such streams hold some 450 MiB of
// messages awaiting their receipts (seen at 514 MiB of RSS for 2 streams with a 1 MB
// header, budget 128 MiB). Every record is still published.
func TestHugeHeaderPropertiesStayInsideTheBudget(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "bigprops")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
memory:
  budget: 16MiB
routes:
  - name: r
    headers: [X-Big]
    default: {topic: %s}
`, b.URL, topic))
	const streams, records = 4, 150
	big := strings.Repeat("x", 768<<10)
	var body []byte
	for i := range records {
		body = recordio.AppendRecord(body, rec(i))
	}
	var wg sync.WaitGroup
	errs := make(chan string, streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", map[string]string{"X-Big": big})
			if err := st.send(); err != nil {
				errs <- err.Error()
				return
			}
			if _, err := st.pw.Write(body); err != nil {
				errs <- err.Error()
				return
			}
			rs, sum, err := st.finish(3 * time.Minute)
			if err != nil || sum.Status != 200 || sum.Published != records || len(rs) != records {
				errs <- fmt.Sprintf("%d receipts, summary %+v, %v", len(rs), sum, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	hwm := processHWM(t, p.cmd.Process.Pid)
	t.Logf("%d streams x %d records with a %d KiB header each as a property: peak RSS %d MiB (budget 16 MiB)",
		streams, records, len(big)>>10, hwm>>20)
	if hwm > 200<<20 {
		t.Fatalf("peak RSS %d MiB: the records' properties are not bounded by memory.budget", hwm>>20)
	}
}

// processHWM reads a process's peak resident set size from /proc.
func processHWM(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
